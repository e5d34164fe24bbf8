"""Where the CPU goes: the CPU time of a set of processes (each with its children: a
prefork worker's pool) over a stretch of the run, per message."""

from __future__ import annotations

from collections.abc import Iterable

import psutil


def cpu_s(pids: Iterable[int]) -> float:
    """User plus system CPU seconds used so far by the processes `pids` and their living
    children (a process gone meanwhile counts 0)."""
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for proc in (root, *root.children(recursive=True)):
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


class CpuMeter:
    """CPU milliseconds per message of each role (`roles`: name → pids) between `start()`
    and `per_message(count)`."""

    def __init__(self, roles: dict[str, list[int]]) -> None:
        self._roles = roles
        self._start = {name: 0.0 for name in roles}

    def start(self) -> CpuMeter:
        self._start = {name: cpu_s(pids) for name, pids in self._roles.items()}
        return self

    def per_message(self, count: int) -> dict[str, float]:
        return {name: (cpu_s(pids) - self._start[name]) * 1000 / max(count, 1)
                for name, pids in self._roles.items()}

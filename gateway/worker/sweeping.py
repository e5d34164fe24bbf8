"""Hook: workers sweep too, so crashed turns heal even while no listener runs (in steps of
the main process's fork gate: gateway/core/forks.py); the sweeper stops with the worker."""

from __future__ import annotations

from collections.abc import Callable

from gateway.chats.sweeper import Sweeper
from gateway.core.forks import fork_gate
from gateway.worker.hooks import Hook
from gateway.worker.worker_runtime import WorkerRuntime


class WorkerSweeper(Hook):
    def __init__(self, runtime: Callable[[], WorkerRuntime]) -> None:
        self._runtime = runtime
        self._sweepers: list[Sweeper] = []

    def ready(self) -> None:
        rt = self._runtime()
        sweeper = Sweeper(rt.store, rt.publisher, rt.settings.sweep_interval_s, fork_gate())
        self._sweepers.append(sweeper)
        sweeper.start()

    def stopping(self) -> None:
        while self._sweepers:
            self._sweepers.pop().stop()

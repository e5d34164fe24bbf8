"""Attributes built once: a process forked while a thread of its parent builds one (a prefork
pool process replaced while the worker's main process handles a revoke) builds its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.core.lazy import cached_property, locked_cached_property
from tests.support.forks import in_fork


@pytest.mark.parametrize("lazy", [cached_property, locked_cached_property])
def test_a_child_forked_while_a_parent_thread_builds_builds_its_own(
        lazy: Callable[[Callable[[Any], int]], Any]) -> None:
    building, release = threading.Event(), threading.Event()

    class Parts:
        @lazy
        def part(self) -> int:
            if threading.current_thread() is not threading.main_thread():
                building.set()
                release.wait(10)  # the parent's thread is still building when the fork comes
            return 7

    builder = threading.Thread(target=lambda: Parts().part, daemon=True)
    builder.start()
    assert building.wait(5)
    code = in_fork(lambda: bool(Parts().part == 7), after_fork=release.set)
    builder.join(5)
    assert code == 0, "the child built its own (-1: it hangs on the parent's lock)"


def test_threads_asking_at_once_build_a_locked_one_once() -> None:
    builds: list[int] = []

    class Parts:
        @locked_cached_property
        def part(self) -> int:
            builds.append(1)
            time.sleep(0.05)  # (a slow build: the other threads arrive meanwhile)
            return len(builds)

    parts = Parts()
    threads = [threading.Thread(target=lambda: parts.part) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert (parts.part, len(builds)) == (1, 1)

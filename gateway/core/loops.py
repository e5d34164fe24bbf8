"""Long-lived threads that survive any exception: one log line, then the next round."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable

import redis

logger = logging.getLogger(__name__)


def describe(error: BaseException) -> str:
    """`Type: message (file:line)` — where it was raised, in one line."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


class Periodic:
    """Calls `step` every `interval_s` on a daemon thread until `stop()`."""

    def __init__(self, name: str, step: Callable[[], object], interval_s: float, *,
                 first_s: float | None = None) -> None:
        """`first_s`: the wait before the first step (default: `interval_s`)."""
        self.name = name
        self._step = step
        self.interval_s = interval_s
        self.first_s = interval_s if first_s is None else first_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        wait_s = self.first_s
        while not self._stopping.wait(wait_s):
            wait_s = self.interval_s
            try:
                self._step()
            except redis.RedisError as error:
                logger.warning("%s: round skipped, redis unavailable: %s", self.name, error)
            except Exception as error:  # noqa: BLE001 (a thread's boundary: it must go on)
                logger.error("%s: round failed, going on: %s", self.name, describe(error))

"""Warm shutdown, told to every process running turns: the worker's main process writes to a
pipe its pool processes share, and a watcher thread in each one stops retrying replies, so a
turn waiting to retry one is handed back at once and the worker leaves within its stop
grace period (TurnRunner.leave)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable

from gateway.worker.hooks import Hook

logger = logging.getLogger(__name__)

NOTICE_BYTES = 4096
"""More than a worker has processes; one write of it is atomic (PIPE_BUF)."""
GREEN_POOLS = {"gevent", "eventlet"}
"""Pools under which no watcher runs (a warm shutdown then waits for the replies' retries,
as it waits for running turns)."""


class ShutdownNotice(Hook):
    """Made in the worker's main process before its pool forks (the pool processes share the
    pipe): the main process writes a byte for each, and each one's watcher takes one."""

    def __init__(self, leave: Callable[[], None]) -> None:
        self._leave = leave
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._watchers: dict[int, threading.Thread] = {}
        self._watching = threading.Lock()

    def shutting_down(self) -> None:
        self.tell()

    def tell(self) -> None:
        """SIGTERM (or SIGINT, SIGQUIT) reached the worker's main process: in its signal
        handler, so only one write, never a lock."""
        with contextlib.suppress(OSError):  # the pipe is full: told already
            os.write(self._write, b"!" * NOTICE_BYTES)

    def watch(self) -> None:
        """Start this process's watcher once, at its first turn (a forked pool process
        starts its own)."""
        if GREEN_POOLS & sys.modules.keys():
            return  # a green thread blocked in os.read would hold the whole process
        pid = os.getpid()
        if pid not in self._watchers:
            with self._watching:
                if pid not in self._watchers:
                    self._watchers.clear()
                    self._watchers[pid] = threading.Thread(target=self._await, daemon=True,
                                                           name="gateway-shutdown")
                    self._watchers[pid].start()

    def _await(self) -> None:
        try:
            os.read(self._read, 1)
        except OSError as error:
            logger.warning("shutdown notices cannot be read in this process: %s", error)
            return
        logger.info("worker shutting down: replies are no longer retried; unsent ones are "
                    "handed back to other workers")
        try:
            self._leave()
        except Exception:  # the boundary of a thread: its turns then end as they would have
            logger.exception("cannot stop retrying replies at shutdown")

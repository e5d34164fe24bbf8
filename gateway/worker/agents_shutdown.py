"""Hook: at a warm shutdown every agent a process built is released, within a bounded time
(each prefork pool process as it ends; the main process with the threads pool), and its
figures withdrawn."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import redis

from gateway.core import metrics
from gateway.worker.hooks import Hook
from gateway.worker.worker_runtime import WorkerRuntime

logger = logging.getLogger(__name__)


class AgentsAtShutdown(Hook):
    def __init__(self, built: Callable[[], WorkerRuntime | None]) -> None:
        self._built = built

    def process_ending(self) -> None:
        self._release()

    def stopping(self) -> None:
        self._release()

    def _release(self) -> None:
        metrics.process_ended(os.getpid())
        built = self._built()
        if built is not None:
            try:
                built.close_agents()
            except redis.RedisError as error:
                logger.warning("agent figures of this process not withdrawn: %s", error)

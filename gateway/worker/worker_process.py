"""A Celery worker process: its WorkerRuntime, built once per process on first use, and the
hooks that check, start and stop what it runs at each moment of its life (the log format,
the host's metrics, the start checks, the agents at shutdown, the sweeper;
gateway/worker/hooks.py hooks them up)."""

from __future__ import annotations

import os
import threading

from gateway.broker.names import TaskSender
from gateway.core.settings import Settings, load_settings
from gateway.worker.agents_shutdown import AgentsAtShutdown
from gateway.worker.hooks import Hook
from gateway.worker.host_metrics import HostMetrics
from gateway.worker.log_setup import LogSetup
from gateway.worker.start_checks import StartChecks
from gateway.worker.sweeping import WorkerSweeper
from gateway.worker.worker_runtime import WorkerRuntime


class WorkerProcess:
    def __init__(self, sender: TaskSender) -> None:
        self._sender = sender
        self._built: dict[int, WorkerRuntime] = {}
        self._building = threading.Lock()

    def runtime(self) -> WorkerRuntime:
        """This process's collaborators, built once per process on first use (a forked pool
        process builds its own; with the threads pool, every thread shares one)."""
        pid = os.getpid()
        if pid not in self._built:
            with self._building:
                if pid not in self._built:
                    self._built.clear()
                    self._built[pid] = WorkerRuntime(load_settings(), self._sender)
        return self._built[pid]

    def built(self) -> WorkerRuntime | None:
        """This process's runtime, if one was built (agents exist only once a turn ran)."""
        return self._built.get(os.getpid())

    def settings(self) -> Settings:
        return self.runtime().settings

    def hooks(self) -> list[Hook]:
        """The process's hooks, in the order each moment runs them."""
        return [LogSetup(self.settings), HostMetrics(self.settings),
                StartChecks(self.runtime), AgentsAtShutdown(self.built),
                WorkerSweeper(self.runtime)]

"""A Celery worker process: its WorkerRuntime, built once per process on first use, and the
Celery signals that check, start and stop what it runs (the log format, the host's metrics,
the agent factory, the key layout, the sweeper, the agents at shutdown)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import redis
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from gateway.agents import load_factory
from gateway.broker.names import TaskSender
from gateway.chats.sweeper import Sweeper
from gateway.core import metrics
from gateway.core.errors import GatewayError, SettingsError
from gateway.core.forks import fork_gate
from gateway.core.logs import dress_handlers, quiet_lark_handler
from gateway.core.settings import load_settings
from gateway.worker.worker_runtime import WorkerRuntime

logger = logging.getLogger(__name__)


class WorkerProcess:
    def __init__(self, sender: TaskSender) -> None:
        self._sender = sender
        self._built: dict[int, WorkerRuntime] = {}
        self._building = threading.Lock()
        self._sweepers: list[Sweeper] = []

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

    def connect(self) -> WorkerProcess:
        """Connect the handlers below to Celery's signals."""
        after_setup_logger.connect(self.dress_logs, weak=False)
        after_setup_task_logger.connect(self.dress_logs, weak=False)
        worker_init.connect(self.serve_metrics, weak=False)
        worker_init.connect(self.check_agent, weak=False)
        worker_init.connect(self.check_keyspace, weak=False)
        worker_ready.connect(self.start_sweeper, weak=False)
        worker_process_shutdown.connect(self.release_agents, weak=False)  # each pool process
        worker_shutdown.connect(self.release_agents, weak=False)  # the main one (threads pool)
        worker_shutdown.connect(self.stop_sweeper, weak=False)
        return self

    def dress_logs(self, logger: logging.Logger, **_: Any) -> None:
        """Celery owns the worker's handlers; we give them our format (GATEWAY_LOG_FORMAT),
        the turn's fields, and keep secrets out of them."""
        dress_handlers(logger, self.runtime().settings.log_format)
        quiet_lark_handler()

    def serve_metrics(self, **_: Any) -> None:
        """The host's `/metrics` (GATEWAY_WORKER_METRICS_PORT), before the pool forks."""
        settings = self.runtime().settings
        fork_gate()  # (made here, on the thread that forks the pool: scrapes step through it)
        if settings.worker_metrics_port:
            metrics.serve_worker(settings.worker_metrics_port, settings.metrics_addr,
                                 settings.prometheus_multiproc_dir)

    def check_agent(self, **_: Any) -> None:
        """A bad GATEWAY_AGENT stops the worker at start, in one line, not at the first turn."""
        try:
            load_factory(self.runtime().settings.agent)
        except SettingsError as error:
            raise SystemExit(f"feishu-gateway: {error}") from None
        quiet_lark_handler()  # an agent's module may have loaded the SDK

    def check_keyspace(self, **_: Any) -> None:
        """A worker whose key layout differs from the chat state's stops at start, in one
        line. A Redis that cannot be reached now is waited for, as ever (turns and sweeps
        retry)."""
        try:
            self.runtime().store.claim_keyspace()
        except SettingsError as error:
            raise SystemExit(f"feishu-gateway: {error}") from None
        except (redis.RedisError, GatewayError) as error:
            logger.warning("cannot check the chat state's key layout now: %s", error)

    def start_sweeper(self, **_: Any) -> None:
        """Workers sweep too, so crashed turns heal even while no listener runs (in steps of
        the main process's fork gate: gateway/core/forks.py)."""
        rt = self.runtime()
        sweeper = Sweeper(rt.store, rt.publisher, rt.settings.sweep_interval_s, fork_gate())
        self._sweepers.append(sweeper)
        sweeper.start()

    def release_agents(self, **_: Any) -> None:
        """Warm shutdown: every agent this process built is released, within a bounded
        time."""
        metrics.process_ended(os.getpid())
        built = self._built.get(os.getpid())
        if built is not None:
            try:
                built.close_agents()
            except redis.RedisError as error:
                logger.warning("agent figures of this process not withdrawn: %s", error)

    def stop_sweeper(self, **_: Any) -> None:
        while self._sweepers:
            self._sweepers.pop().stop()

"""Hook: the worker host's `/metrics` (GATEWAY_WORKER_METRICS_PORT), served before the pool
forks (gateway/core/metrics.py)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.core import metrics
from gateway.core.forks import fork_gate
from gateway.core.settings import Settings
from gateway.worker.hooks import Hook


class HostMetrics(Hook):
    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings

    def starting(self) -> None:
        settings = self._settings()
        fork_gate()  # (made here, on the thread that forks the pool: scrapes step through it)
        if settings.worker_metrics_port:
            metrics.serve_worker(settings.worker_metrics_port, settings.metrics_addr,
                                 settings.prometheus_multiproc_dir)

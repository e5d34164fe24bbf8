"""Each worker process's agent figures in Redis, for `feishu-gateway status`, and in its log.

One hash, `gw:agents`: field = the process's id, value = its figures as JSON with the time
they were taken. A process writes its field every few seconds and deletes it when it shuts
down; a reader skips (and deletes) fields older than `STALE_S`, left by a process that died.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis

from gateway.core import metrics
from gateway.core.presence import publish, read_live

logger = logging.getLogger(__name__)

AGENTS_KEY = "gw:agents"
EVERY_S = 10.0
STALE_S = 120.0
LOG_EVERY_S = 60.0


class AgentReport:
    """Publishes one process's figures (`figures()`), and logs a summary line at most once a
    minute when they changed."""

    def __init__(self, client: redis.Redis, owner: str,
                 figures: Callable[[], dict[str, Any]]) -> None:
        self._redis = client
        self.owner = owner
        self._figures = figures
        self._logged: tuple[Any, ...] = ()
        self._logged_at = 0.0

    def step(self) -> None:
        figures = self._figures()
        metrics.agent_figures(figures)
        publish(self._redis, AGENTS_KEY, self.owner, figures)
        self._log(figures)

    def _log(self, f: dict[str, Any]) -> None:
        changed = (f["built"], f["soft"], f["hard"], f["failed"], f["in_place"])
        now = time.monotonic()
        if changed == self._logged or now - self._logged_at < LOG_EVERY_S:
            return
        self._logged, self._logged_at = changed, now
        logger.info("agents: %s", summary(f))

    def withdraw(self) -> None:
        self._redis.hdel(AGENTS_KEY, self.owner)


def summary(f: dict[str, Any]) -> str:
    """One process's figures in one line (the log and `feishu-gateway status`)."""
    evicted = " ".join(f"{k}={v}" for k, v in sorted(f.get("evictions", {}).items())) or "none"
    return (f"{f.get('size', 0)} cached (cap {f.get('cap', '?')}, {f.get('held', 0)} in use), "
            f"{f.get('built', 0)} built; let go: {evicted}; released soft={f.get('soft', 0)} "
            f"hard={f.get('hard', 0)} failed={f.get('failed', 0)} "
            f"in-place={f.get('in_place', 0)} (slowest {f.get('release_s_max', 0):.3f}s), "
            f"{f.get('parked', 0)} waiting; config {f.get('signature') or '-'}")


def read_reports(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every live process's figures, by process id; stale and unreadable fields are dropped."""
    return read_live(client, AGENTS_KEY, STALE_S)

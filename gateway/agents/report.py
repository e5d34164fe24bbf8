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
        logger.info("agents: %s", summary(view(f)))

    def withdraw(self) -> None:
        self._redis.hdel(AGENTS_KEY, self.owner)


def view(f: dict[str, Any], now_s: float | None = None) -> dict[str, Any]:
    """One process's figures as people and tools read them (`feishu-gateway status --json`):
    its cache (cached, cap, in use, built), the agents it let go by reason, their releases by
    kind (and the slowest and total seconds they took), those waiting to be released, the
    configuration they are built under, and how old the figures are."""
    at = f.get("at")
    now_s = time.time() if now_s is None else now_s
    return {
        "cached": f.get("size", 0), "cap": f.get("cap"), "in_use": f.get("held", 0),
        "built": f.get("built", 0), "let_go": dict(sorted((f.get("evictions") or {}).items())),
        "released": {kind: f.get(kind, 0) for kind in ("soft", "hard", "failed", "in_place")},
        "release_s_max": f.get("release_s_max", 0.0),
        "release_s_total": f.get("release_s_total", 0.0),
        "waiting": f.get("parked", 0), "config": f.get("signature") or None,
        "age_s": round(max(0.0, now_s - float(at)), 1) if at is not None else None}


def summary(v: dict[str, Any]) -> str:
    """One process's figures (`view`) in one line (the log and `feishu-gateway status`)."""
    let_go = " ".join(f"{reason}={n}" for reason, n in v["let_go"].items()) or "none"
    r = v["released"]
    return (f"{v['cached']} cached (cap {'?' if v['cap'] is None else v['cap']}, "
            f"{v['in_use']} in use), {v['built']} built; let go: {let_go}; released "
            f"soft={r['soft']} hard={r['hard']} failed={r['failed']} in-place={r['in_place']} "
            f"(slowest {v['release_s_max']:.3f}s), {v['waiting']} waiting; config "
            f"{v['config'] or '-'}")


def read_reports(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every live process's figures, by process id; stale and unreadable fields are dropped."""
    return read_live(client, AGENTS_KEY, STALE_S)

"""Prometheus metrics of the listener and the workers, and their `/metrics` endpoints.

Nothing here imports `prometheus_client` until `serve_listener` or `serve_worker` runs, and
until then every record call is a no-op: the CLI and processes without a metrics port pay
nothing. A worker host serves in prometheus_client's multiprocess mode (each prefork pool
process writes its figures to files in one folder, the main process serves their sum), set
up in `worker_init`, before the pool forks.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gateway.core.forks import fork_gate
from gateway.core.presence import UP_STATES

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's own switch to the multiprocess mode (read when it is imported)."""

QUEUE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
TURN_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
ACK_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

RELEASES = ("soft", "hard", "failed", "in_place")
"""How an agent was released (gateway/agents/release.py)."""

_lock = threading.Lock()
_m: dict[str, Any] = {}
"""The metric objects by short name, once a role serves them (empty: recording is off)."""
_agents_seen: dict[str, float] = {}


def _build(prom: Any, role: str) -> dict[str, Any]:
    c, h, g = prom.Counter, prom.Histogram, prom.Gauge
    if role == "listener":
        return {
            "events": c("gateway_events_total", "Message events by what the listener did with "
                        "them (claimed, queued, duplicate, command, refused, malformed, late, "
                        "full)", ["outcome"]),
            "refused": c("gateway_events_refused_total", "Events refused at admission",
                         ["reason"]),
            "changes": c("gateway_chat_changes_total", "Withdrawn and edited messages, the bot "
                         "added to or removed from chats, DMs opened, by what was done",
                         ["event", "outcome"]),
            "unhandled": c("gateway_events_unhandled_total", "Events of types the gateway does "
                           "not handle (ACKed and dropped)", ["type"]),
            "ack": h("gateway_ack_seconds", "From a frame's arrival to its ACK sent", ["code"],
                     buckets=ACK_BUCKETS_S),
            "shed": c("gateway_events_shed_total", "Events answered with a failure because "
                      "their Redis step could not begin within FEISHU_INGEST_WAIT_MAX_MS "
                      "(taken later, or delivered again by Feishu)"),
            "later": c("gateway_events_later_total", "Refused events kept to take later "
                       "(kept), taken by a later step (taken), or left to Feishu's delivery "
                       "again (dropped: FEISHU_INGEST_LATER_CAP)", ["what"]),
            "reactions": c("gateway_reactions_total", "Reactions people added to or took "
                           "back from the bot's answers, by emoji type (a set of common ones; "
                           "the rest are `other`)", ["emoji", "action"]),
            "cancels": c("gateway_cancellations_total", "Stops of chats' turns, by how they "
                         "ended", ["how"]),
        }
    releases = c("gateway_agent_releases_total", "Agents released, by how", ["how"])
    for how in RELEASES:
        releases.labels(how)
    return {
        "releases": releases,
        "queued": h("gateway_turn_queue_seconds", "From a turn's publish to its start",
                    buckets=QUEUE_BUCKETS_S),
        "turn": h("gateway_turn_seconds", "From a turn's start to its end, by outcome",
                  ["outcome"], buckets=TURN_BUCKETS_S),
        "merged": c("gateway_messages_merged_total", "Messages answered together with others "
                    "in one turn (busy modes merge and interrupt), by how the turn ended",
                    ["outcome"]),
        "retries": c("gateway_send_retries_total", "Open API calls tried again"),
        "yielded": c("gateway_sends_yielded_total", "Cosmetic calls (streaming updates, "
                     "reactions) skipped because replies were waiting for the send quota"),
        "rate_wait": c("gateway_rate_limit_wait_seconds_total",
                       "Time sends waited for the shared Feishu quota"),
        "undelivered": c("gateway_replies_undelivered_total", "Replies given up"),
        "agents": g("gateway_agents_cached", "Agents held in the agent caches",
                    multiprocess_mode="livesum"),
        "evictions": c("gateway_agent_evictions_total", "Agents let go by the caches",
                       ["cause"]),
    }


def serve_listener(port: int, addr: str, connections: Callable[[], Iterable[Any]]) -> None:
    """The listener's `/metrics` on `addr:port`, with each app's connection state read at
    scrape time from `connections()` (objects with app_id, state, reconnects). Raises
    OSError when the port cannot be bound."""
    import prometheus_client as prom
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class Connections:
        def collect(self) -> Iterator[Any]:
            up = GaugeMetricFamily("gateway_connection_up", "1 while the app's long "
                                   "connection is connected (in webhook mode: while its "
                                   "server serves)", labels=["app"])
            again = CounterMetricFamily("gateway_reconnects", "Reconnects of the app's long "
                                        "connection", labels=["app"])
            for status in connections():
                up.add_metric([status.app_id], 1.0 if status.state in UP_STATES else 0.0)
                again.add_metric([status.app_id], float(status.reconnects))
            yield up
            yield again

    prom.start_http_server(port, addr=addr)  # OSError (a port in use): the caller's to say
    with _lock:
        if not _m:
            _m.update(_build(prom, "listener"))
        prom.REGISTRY.register(Connections())
    logger.info("metrics on http://%s:%d/metrics", addr, port)


def serve_worker(port: int, addr: str, folder: str) -> bool:
    """A worker host's `/metrics`, summing every pool process's figures: prometheus_client's
    multiprocess mode, which needs PROMETHEUS_MULTIPROC_DIR (`folder`) in the worker's
    environment from its start (the `celery` command imports prometheus_client, through
    Flower's plugin, before any gateway code runs). Call it in the main process before the
    pool forks; figures left in `folder` by an earlier run are cleared."""
    if not folder or os.environ.get(MULTIPROC_ENV) != folder:
        logger.error("worker metrics not served: GATEWAY_WORKER_METRICS_PORT needs "
                     "%s=<a folder of its own> in the worker's environment", MULTIPROC_ENV)
        return False
    try:
        os.makedirs(folder, exist_ok=True)
        mine = f"_{os.getpid()}.db"
        for name in os.listdir(folder):
            if name.endswith(".db") and not name.endswith(mine):
                os.unlink(os.path.join(folder, name))
    except OSError as error:
        logger.error("worker metrics not served: %s=%s cannot be used (%s); the worker runs "
                     "on without them", MULTIPROC_ENV, folder, error.strerror or error)
        return False
    import prometheus_client as prom
    from prometheus_client import multiprocess

    with _lock:
        if not _m:
            _m.update(_build(prom, "worker"))
    registry = prom.CollectorRegistry()
    registry.register(_Living(folder, multiprocess))
    return _start(prom, port, addr, registry)


class _Living:
    """The sum of the pool processes' figures, with the live gauges of any process that died
    without its shutdown hook (SIGKILL, an OOM kill) dropped first."""

    def __init__(self, folder: str, multiprocess: Any) -> None:
        self._folder = folder
        self._multiprocess = multiprocess
        self._sum = multiprocess.MultiProcessCollector(None, folder)

    def collect(self) -> Iterable[Any]:
        with fork_gate().step():  # (on a thread of a worker's main process: core/forks.py)
            for pid in _dead_pids(self._folder):
                try:
                    self._multiprocess.mark_process_dead(pid, self._folder)
                except FileNotFoundError:  # a scrape at the same time removed its files first
                    continue
            return list(self._sum.collect())


def _dead_pids(folder: str) -> set[int]:
    """Processes with live-gauge files in `folder` that no longer exist."""
    pids = {int(m.group(1)) for m in map(_LIVE_FILE.fullmatch, os.listdir(folder)) if m}
    return {pid for pid in pids if not _alive(pid)}


_LIVE_FILE = re.compile(r"gauge_live\w*_(\d+)\.db")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start(prom: Any, port: int, addr: str, registry: Any) -> bool:
    try:
        prom.start_http_server(port, addr=addr, registry=registry)
    except OSError as error:
        logger.warning("metrics not served on %s:%d: %s", addr, port, error)
        return False
    logger.info("metrics on http://%s:%d/metrics", addr, port)
    return True


def process_ended(pid: int) -> None:
    """A pool process is gone: its live gauges stop counting (multiprocess mode)."""
    if _m and MULTIPROC_ENV in os.environ:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


# what the gateway records (no-ops until served; `_m.get`: a role's metrics may be
# half-registered while another thread records)
def event(outcome: str) -> None:
    if (m := _m.get("events")) is not None:
        m.labels(outcome).inc()


def changed(event: str, outcome: str) -> None:
    if (m := _m.get("changes")) is not None:
        m.labels(event, outcome).inc()


UNHANDLED_TYPES_MAX = 50
"""Distinct event types counted by name; the rest (and any type no label can carry) are
counted as `other`, so a stream of made-up types cannot grow the series without bound."""
_unhandled_types: set[str] = set()


def unhandled(event_type: str) -> None:
    if (m := _m.get("unhandled")) is not None:
        known = event_type in _unhandled_types
        if not known and len(_unhandled_types) < UNHANDLED_TYPES_MAX and \
                event_type.isascii() and event_type.isprintable() and len(event_type) <= 100:
            _unhandled_types.add(event_type)
            known = True
        m.labels(event_type if known else "other").inc()


def reacted(emoji: str, action: str) -> None:
    if (m := _m.get("reactions")) is not None:
        m.labels(emoji, action).inc()


def refused(reason: str) -> None:
    if (m := _m.get("refused")) is not None:
        m.labels(reason).inc()


def shed() -> None:
    if (m := _m.get("shed")) is not None:
        m.inc()


def later(what: str, count: int = 1) -> None:
    if (m := _m.get("later")) is not None:
        m.labels(what).inc(count)


def acked(seconds: float, code: int) -> None:
    if (m := _m.get("ack")) is not None:
        m.labels(str(code)).observe(seconds)


def cancelled(how: str) -> None:
    if (m := _m.get("cancels")) is not None:
        m.labels(how).inc()


def turn_started(queued_s: float) -> None:
    if (m := _m.get("queued")) is not None and queued_s >= 0:
        m.observe(queued_s)


def turn_ended(outcome: str, seconds: float) -> None:
    if (m := _m.get("turn")) is not None:
        m.labels(outcome).observe(seconds)


def merged(outcome: str, messages: int) -> None:
    if (m := _m.get("merged")) is not None and messages > 1:
        m.labels(outcome).inc(messages)


def yielded() -> None:
    if (m := _m.get("yielded")) is not None:
        m.inc()


def send_retried() -> None:
    if (m := _m.get("retries")) is not None:
        m.inc()


def rate_waited(seconds: float) -> None:
    if (m := _m.get("rate_wait")) is not None and seconds > 0:
        m.inc(seconds)


def undelivered() -> None:
    if (m := _m.get("undelivered")) is not None:
        m.inc()


def agent_figures(figures: dict[str, Any]) -> None:
    """One process's agent cache figures (gateway/agents/report.py): the size as it is now,
    the cumulative counts as the increase since the last call."""
    agents, evictions, releases = _m.get("agents"), _m.get("evictions"), _m.get("releases")
    if agents is None or evictions is None or releases is None:
        return
    agents.set(float(figures.get("size", 0)))
    counts = {f"evict:{k}": v for k, v in (figures.get("evictions") or {}).items()}
    counts.update({f"release:{k}": figures.get(k, 0) for k in RELEASES})
    for key, value in counts.items():
        grew = float(value) - _agents_seen.get(key, 0.0)
        _agents_seen[key] = float(value)
        if grew > 0:
            kind, name = key.split(":", 1)
            (evictions if kind == "evict" else releases).labels(name).inc(grew)

"""Live records of running processes in one Redis hash, for `feishu-gateway status`.

Field = who (a process, or a process and an app), value = JSON with the time it was taken
(`at`). Writers refresh their fields every few seconds (and the hash's TTL, so the hash
of a fleet that is gone goes too); a reader skips (and deletes) fields older than
`stale_s`, left by a process that died or stopped.

Ages are judged on Redis's clock, the one every host shares: `at` is Redis's time when the
record was written, the writer's own times (`times`: its `time.monotonic()` seconds, which
no step of its host's clock moves) are put on Redis's clock as they are written, and a
reader moves them onto its own. So a writer or a reader whose host clock is off by minutes,
or steps, is neither hidden nor aged wrongly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import redis

CONNECTIONS_KEY = "gw:connections"
"""Each listener's long connections, by `process|app_id` (gateway/feishu/ws/connections.py)."""
CONNECTIONS_STALE_S = 30.0
CONNECTION_TIMES = ("since", "last_frame_at", "last_event_at")
"""The host-clock times a connection's record carries."""
UP_STATES = ("connected", "serving")
"""An app's long connection connected, or its webhook server serving (`serve`)."""
STOPPED = "stopped"
"""A listener's last record as it stops: kept (for `status`) until it is stale."""


def redis_time_s(client: redis.Redis) -> float:
    """Redis's clock, in epoch seconds."""
    seconds, micros = client.time()
    return int(seconds) + int(micros) / 1_000_000


def _shifted(record: dict[str, Any], times: Sequence[str], by_s: float) -> dict[str, Any]:
    """`record` with each of its `times` (when set) moved by `by_s` seconds."""
    return {**record, **{name: float(record[name]) + by_s for name in times
                         if isinstance(record.get(name), int | float) and record[name]}}


def publish(client: redis.Redis, key: str, field: str, record: dict[str, Any], *,
            ttl_s: int = 3600, times: Sequence[str] = ()) -> None:
    now = redis_time_s(client)
    record = _shifted(record, times, now - time.monotonic())
    with client.pipeline(transaction=False) as pipe:
        pipe.hset(key, field, json.dumps({**record, "at": now}, separators=(",", ":")))
        pipe.expire(key, ttl_s)
        pipe.execute()


def read_live(client: redis.Redis, key: str, stale_s: float, *,
              times: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Every fresh record by field, its `times` on this host's clock; stale and unreadable
    fields are dropped."""
    now = redis_time_s(client)
    to_host_s = time.time() - now
    live, dead = {}, []
    for raw_field, raw in client.hgetall(key).items():
        field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
        try:
            record = json.loads(raw)
            fresh = now - float(record["at"]) < stale_s
            if fresh:
                live[field] = _shifted(record, (*times, "at"), to_host_s)
        except (ValueError, KeyError, TypeError):
            fresh = False
        if not fresh:
            dead.append(field)
    if dead:
        client.hdel(key, *dead)
    return live


def read_connections(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every live listener's connection states, by `process|app_id`."""
    return read_live(client, CONNECTIONS_KEY, CONNECTIONS_STALE_S, times=CONNECTION_TIMES)

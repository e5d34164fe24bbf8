"""The window in which processes of the version before may still run beside this one.

This version keeps dedupe marks by day (lua/include/marks.lua) where the one before kept a
key per message (`seen:<id>`), and copies a running turn's stop and the chat's busy mode
into its lease. `gw:marks:since` (keys.py) records, on Redis's clock, when the first process
of this version started on a Redis that already held chat state (0 on a fresh Redis: there
is nothing to be compatible with). From then on:

- for `WINDOW_MS` (a rolling upgrade's time), processes of the version before may still
  run (`mixed`): an admitted message also gets the key per message, checked and written in
  one `SET NX GET`, and the scripts read the stop flag and the busy mode where the version
  before writes them, not the lease's copies;
- a message created before it (plus `MARGIN_MS` for Feishu's clock) is also looked up under
  the key per message (`legacy_before_ms`): the version before may have admitted it.

Read once per process and again every `RECHECK_S`, never on a host's clock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import redis

from gateway.chats.keys import MARKS_SINCE_KEY
from gateway.core.presence import redis_time_s

WINDOW_MS = 86_400_000
MARGIN_MS = 60_000
RECHECK_S = 600.0


@dataclass(frozen=True, slots=True)
class Compat:
    legacy_before_ms: int
    """A message created before this (Redis ms) is also looked up under `seen:<id>`."""
    mixed: bool
    """Processes of the version before may still run."""


class Upgrade:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._lock = threading.Lock()
        self._known: tuple[float, Compat] | None = None

    def record(self, fresh: bool) -> None:
        """At a process's start: note when this version first ran here (once per Redis;
        `fresh`: no chat state was ever kept here)."""
        since = 0 if fresh else int(redis_time_s(self._redis) * 1000)
        self._redis.set(MARKS_SINCE_KEY, since, nx=True)
        self._known = None

    def now(self) -> Compat:
        """What the scripts must be compatible with now (redis.RedisError when it must be
        read and Redis cannot be)."""
        known = self._known
        if known is not None and time.monotonic() < known[0]:
            return known[1]
        with self._lock:
            # (none recorded: no process started here, or Redis lost its data, the older
            # marks with it)
            since = int(self._redis.get(MARKS_SINCE_KEY) or 0)
            now_ms = int(redis_time_s(self._redis) * 1000) if since > 0 else 0
            compat = Compat(since + MARGIN_MS if since > 0 else 0,
                            since > 0 and now_ms < since + WINDOW_MS)
            self._known = (time.monotonic() + RECHECK_S, compat)
            return compat

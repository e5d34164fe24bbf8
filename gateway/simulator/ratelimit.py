"""A per-app frequency limit over the sending calls, and the record of what got through.

Feishu's frequency control (server-docs api-call-guide/frequency-control): over the limit
an API answers HTTP 429, {"code": 99991400, "msg": "request trigger frequency limit"},
with `x-ogw-ratelimit-limit` (the window's limit) and `x-ogw-ratelimit-reset` (seconds
until it recovers). Feishu counts per API, app and tenant; the simulator keeps one
sliding one-second window per app over every sending call together (create, reply,
update, patch, reactions, CardKit), which is what a gateway budgeting its sends sees.
Off by default. Admitted calls are recorded whether or not a limit is set. The calls pass
it in callers.py.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque

WINDOW_S = 1.0


class RateLimiter:
    """Thread-safe; a limit for every app (app_id None) and/or per app (which wins)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._default: int | None = None
        self._per_app: dict[str, int] = {}
        self._windows: dict[str, deque[float]] = {}
        self._admitted: dict[str, list[float]] = {}
        self._limited: Counter[str] = Counter()

    def set(self, per_s: int | None, app_id: str | None = None) -> None:
        if per_s is not None and (isinstance(per_s, bool) or per_s < 1):
            raise ValueError(f"a rate limit is a positive number of calls per second: {per_s}")
        with self._lock:
            if app_id is None:
                self._default = per_s
            elif per_s is None:
                self._per_app.pop(app_id, None)
            else:
                self._per_app[app_id] = per_s

    def admit(self, app_id: str) -> tuple[int, int] | None:
        """None when the call may go on (it is recorded); else (limit, reset seconds)."""
        now, wall = time.monotonic(), time.time()
        with self._lock:
            window = self._windows.setdefault(app_id, deque())
            while window and window[0] <= now - WINDOW_S:
                window.popleft()
            limit = self._per_app.get(app_id, self._default)
            if limit is not None and len(window) >= limit:
                self._limited[app_id] += 1
                return limit, max(1, math.ceil(window[0] + WINDOW_S - now))
            window.append(now)
            self._admitted.setdefault(app_id, []).append(wall)
            return None

    def times(self, app_id: str | None = None) -> list[float]:
        """When admitted calls came (time.time()), of one app or of every app, sorted."""
        with self._lock:
            lists = [v for k, v in self._admitted.items() if app_id is None or k == app_id]
            return sorted(t for times in lists for t in times)

    def per_second(self, app_id: str | None = None) -> list[int]:
        """Admitted calls per wall-clock second, from the first call's second to the
        last one's (seconds without calls count 0)."""
        times = self.times(app_id)
        if not times:
            return []
        first = int(times[0])
        counts = [0] * (int(times[-1]) - first + 1)
        for t in times:
            counts[int(t) - first] += 1
        return counts

    def limited(self, app_id: str | None = None) -> int:
        """Calls answered 429 by this limit (injected faults are not counted here)."""
        with self._lock:
            return sum(n for k, n in self._limited.items() if app_id is None or k == app_id)


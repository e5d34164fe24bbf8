"""Feishu's send quota, shared by every worker process through Redis.

Each app has one bucket pair (per second and per minute, Feishu's documented 50/s and
1000/min for sending messages), each chat one bucket (Feishu: 5/s to one user or group),
sized so that no second (or minute) ever sees more than its limit.
A send waits for a token from its chat's and its app's buckets (take.lua), the chat's
first; when the app's does not come in time, the chat's token is given back. Streaming
updates and reactions draw at a low priority: they leave a reserve for final replies, and
while a reply waits for the quota they take nothing at all (they yield: `Yielded`, or they
wait when told to be patient), so cosmetic calls never make a reply wait. A
"rate limited" answer holds the app's whole quota until Feishu's reset time (hold.lua),
so no worker hammers it after a refusal.

When Redis cannot be reached the send goes ahead (logged): the quota protects Feishu from
bursts, it must not stop replies.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import redis

from gateway.core import metrics
from gateway.core.errors import Yielded
from gateway.core.scripts import register

logger = logging.getLogger(__name__)


class Interrupt(Protocol):
    """What a wait stops on: a `threading.Event`, or anything that waits like one."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


TTL_S = 120
"""A quota nobody drew from for this long is forgotten (it is full again by then)."""
LOW_RESERVE = 0.2
"""The share of each bucket a low-priority draw must leave for final replies."""
MAX_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class Rates:
    per_s: float = 50.0
    """Sends per second per app (FEISHU_SEND_RATE_PER_S)."""
    per_min: float = 1000.0
    """Sends per minute per app (FEISHU_SEND_RATE_PER_MIN)."""
    chat_per_s: float = 5.0
    """Sends per second to one chat (FEISHU_CHAT_SEND_RATE_PER_S)."""


BURST_SHARE = 0.2
"""A bucket holds this share of its window's limit; the rest refills evenly over the
window. So no window of that length ever sees more sends than the limit (burst + refill),
and a steady stream gets 80% of it."""


def bucket(limit: float, window_s: float) -> list[float]:
    """[refill per second, capacity] of the bucket for `limit` sends per `window_s`."""
    return [limit * (1 - BURST_SHARE) / window_s, max(limit * BURST_SHARE, 1.0)]


def app_key(app_id: str) -> str:
    return f"gw:quota:app:{app_id}"


def chat_key(chat_id: str) -> str:
    return f"gw:quota:chat:{chat_id}"


class Quota:
    """Thread-safe: a Redis client and the registered scripts only."""

    def __init__(self, client: redis.Redis, rates: Rates | None = None) -> None:
        self.rates = rates or Rates()
        self._redis = client
        scripts = register(client, "gateway.feishu.outbound")
        self._take, self._hold = scripts["take"], scripts["hold"]

    def _buckets(self, key: str) -> list[float]:
        r = self.rates
        if key.startswith("gw:quota:chat:"):
            return bucket(r.chat_per_s, 1.0)
        return [*bucket(r.per_s, 1.0), *bucket(r.per_min, 60.0)]

    def _wait_ms(self, key: str, low: bool, cost: int = 1) -> int:
        args = [cost, LOW_RESERVE if low else 0, TTL_S, *self._buckets(key)]
        return int(self._take(keys=[key], args=args))

    def acquire(self, app_id: str, chat_id: str = "", *, low: bool = False,
                patient: bool = False, stopped: Interrupt | None = None,
                timeout_s: float = 60.0) -> bool:
        """Wait for a send's tokens (the chat's first, then the app's); False when
        `timeout_s` passed or `stopped` was set first. True at once when Redis fails.
        A `low` draw while replies wait for the quota raises `Yielded` at once, unless it
        is `patient` (then it waits for them)."""
        began = time.monotonic()
        deadline = began + timeout_s
        interrupt = stopped if stopped is not None else threading.Event()
        try:
            return self._acquire(app_id, chat_id, low, patient, interrupt, deadline)
        finally:
            metrics.rate_waited(time.monotonic() - began)

    def _acquire(self, app_id: str, chat_id: str, low: bool, patient: bool,
                 interrupt: Interrupt, deadline: float) -> bool:
        keys = ([chat_key(chat_id)] if chat_id else []) + [app_key(app_id)]
        for taken, key in enumerate(keys):
            try:
                if self._take_one(key, low, patient, interrupt, deadline):
                    continue
            except Yielded:
                self._give_back(keys[:taken], low)
                metrics.yielded()
                raise
            except redis.RedisError as error:
                logger.warning("send quota unavailable (%s); sending without it", error)
                return True
            self._give_back(keys[:taken], low)  # the chat's token goes back unused
            return False
        return True

    def _give_back(self, keys: list[str], low: bool) -> None:
        for key in keys:
            try:
                self._wait_ms(key, low, cost=-1)
            except redis.RedisError as error:
                logger.warning("send quota token not given back (%s)", error)

    def _take_one(self, key: str, low: bool, patient: bool, interrupt: Interrupt,
                  deadline: float) -> bool:
        """Wait for a token of one quota; False when the deadline passed or `interrupt`
        was set first; `Yielded` (a low draw, not patient) while replies wait for it."""
        while True:
            wait_ms = self._wait_ms(key, low)
            if wait_ms == 0:
                return True
            if wait_ms < 0:  # replies are waiting: cosmetic calls yield
                if not patient:
                    raise Yielded("replies are waiting for the send quota")
                wait_ms = -wait_ms
            left_s = deadline - time.monotonic()
            if left_s <= 0 or interrupt.wait(min(wait_ms / 1000, left_s, MAX_POLL_S)):
                return False

    def hold(self, app_id: str, seconds: float) -> None:
        """Feishu said "rate limited" for `seconds`: every worker waits that long."""
        try:
            self._hold(keys=[app_key(app_id)], args=[max(int(seconds * 1000), 1), TTL_S])
        except redis.RedisError as error:
            logger.warning("send quota hold not recorded (%s)", error)

"""One heartbeat thread per process: extends the lease of every turn running in it.

Every `poll_s` it checks every running turn in one round trip and stops the turns that were
cancelled (/stop) or lost their lease; every `extend_every_s` that same round trip also
extends each turn's lease and pushes its chat's sweeper deadline along. A turn older than
GATEWAY_TURN_TIME_LIMIT_S is no longer extended whatever the pool (Celery enforces time
limits only in prefork): its lease runs out and the chat goes on, so a hung agent cannot
hold a chat forever.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from gateway.chats.store import ChatStore
from gateway.core.loops import Periodic
from gateway.worker.handles import SHUTDOWN, TIME_LIMIT, ChatHandles

logger = logging.getLogger(__name__)

_REASONS = {"lost": "lost its lease", "stopped": "was cancelled"}


class Heartbeater:
    def __init__(self, store: ChatStore, registry: ChatHandles, *, poll_s: float,
                 time_limit_s: float, extend_every_s: float = 0.0) -> None:
        self._store = store
        self._registry = registry
        self.poll_s = poll_s
        self.extend_every_s = extend_every_s
        self.time_limit_s = time_limit_s
        self._guard = threading.Lock()
        self._loop: Periodic | None = None

    def ensure_running(self) -> None:
        """Start the thread on first use (after a pool fork) or when it is gone."""
        with self._guard:
            if self._loop is None or not self._loop.alive:
                self._loop = Periodic("gateway-heartbeat", self.beat_once, self.poll_s).start()

    def stop(self) -> None:
        with self._guard:
            if self._loop is not None:
                self._loop.stop()

    def beat_once(self) -> None:
        now = time.monotonic()
        live = []
        for handle in self._registry.running():
            if handle.stopped.is_set() and handle.reason != SHUTDOWN:
                continue  # (a turn its leaving worker waits for keeps its lease)
            if now - handle.started_at > self.time_limit_s:
                logger.error("turn %s of chat %s ran past GATEWAY_TURN_TIME_LIMIT_S (%.0fs): "
                             "its lease is no longer extended", handle.turn.message_id,
                             handle.turn.chat_id, self.time_limit_s)
                handle.stop(TIME_LIMIT)
                continue
            live.append(handle)
        if not live:
            return
        extend = [now - h.extended_at >= self.extend_every_s for h in live]
        try:
            states = self._store.turns.heartbeat([h.turn for h in live], extend)
        except redis.RedisError as error:
            logger.warning("heartbeat of %d turn(s) failed: %s", len(live), error)
            return
        for handle, state, extended in zip(live, states, extend, strict=True):
            if extended and state == "held":
                handle.extended_at = now
            if state != "held":
                logger.info("turn %s of chat %s %s", handle.turn.message_id,
                            handle.turn.chat_id, _REASONS[state])
                handle.stop(_REASONS[state])

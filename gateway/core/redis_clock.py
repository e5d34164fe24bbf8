"""Redis's clock, read without a round trip: `now_s()` is Redis's time as of its last
sample plus this host's monotonic seconds since, so neither a step of this host's wall clock
nor a call on an event loop is involved. Sampled at start and every `every_s` on a thread
of its own."""

from __future__ import annotations

import time

import redis

from gateway.core.loops import Periodic
from gateway.core.presence import redis_time_s


class RedisClock:
    def __init__(self, client: redis.Redis, every_s: float = 30.0) -> None:
        self._redis = client
        self._offset_s: float | None = None
        self._sampler = Periodic("gateway-redis-clock", self.sample, every_s)

    def sample(self) -> None:
        """Read Redis's TIME now (half the round trip is taken as its moment)."""
        before = time.monotonic()
        now = redis_time_s(self._redis)
        after = time.monotonic()
        self._offset_s = now - (before + after) / 2

    def start(self) -> RedisClock:
        """Sample now (redis.RedisError if Redis cannot be read), then every few seconds."""
        self.sample()
        self._sampler.start()
        return self

    def stop(self) -> None:
        self._sampler.stop()

    def now_s(self) -> float:
        """Redis's time in epoch seconds (this host's until the first sample)."""
        if self._offset_s is None:
            return time.time()
        return time.monotonic() + self._offset_s

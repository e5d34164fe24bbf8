"""The bench's agent: echoes like `echo`, except `wait` (runs until the turn is cancelled,
checking every 5 ms) and `mark ...` (records when its turn started, for /stop -> next)."""

from __future__ import annotations

import time
from functools import cache

import redis

from gateway.core.model import Turn
from gateway.core.settings import load_settings

STARTS_KEY = "bench:starts"


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(load_settings().redis_url)


class BenchAgent:
    def run(self, turn: Turn) -> str | None:
        if turn.text.startswith("mark "):
            _client().hset(STARTS_KEY, turn.message_id, repr(time.time()))
        elif turn.text == "wait":
            _client().hset(STARTS_KEY, turn.message_id, repr(time.time()))
            deadline = time.monotonic() + 30
            while not turn.cancelled() and time.monotonic() < deadline:
                time.sleep(0.005)
            return None
        return f"echo: {turn.text}"


class BenchFactory:
    stateless = True  # like echo: nothing of a session is kept between turns

    def __call__(self, session_key: str) -> BenchAgent:
        return BenchAgent()


factory = BenchFactory()

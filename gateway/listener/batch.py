"""A batch of frames on the listener's ingest thread (group commit): what each frame's
answer is, and when the rest of a batch is not tried (each frame's own boundary:
gateway/feishu/gate.py `answer_or_error`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import redis

from gateway.core.errors import GatewayError, TakeLater
from gateway.core.redis_client import refused_outright

Outcome = Mapping[str, Any] | None | Exception
"""A frame's answer (None: a plain ACK), or the error that answers it 500."""


class RedisUnavailable(TakeLater):
    """The event's Redis step failed (a timeout, a lost connection, an error): ACK 500, and
    a later step takes it."""


class RedisRefused(GatewayError):
    """Redis answered the event's step with an error another try would meet again (a key
    of the wrong type, a script's own error): ACK 500, not kept (Feishu delivers it again),
    and the rest of its batch goes on: one such event never holds its chat, nor its app."""


def redis_failure(error: redis.RedisError) -> RedisUnavailable | RedisRefused:
    """What a Redis error answers an event with: RedisRefused when Redis refused this very
    step (core/redis_client.py `refused_outright`), else RedisUnavailable (kept, taken
    later)."""
    if refused_outright(error):
        return RedisRefused(f"Redis refused the event's step: {error}")
    return RedisUnavailable(f"Redis unavailable: {error}")


class Batch:
    """The frames taken together: the step ends by `deadline` (time.monotonic(); None: no
    bound), and once Redis failed one of them the rest are not tried (each would wait out
    its own timeout): both answer 500, and a later step takes them."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.failed = False

    @classmethod
    def within(cls, budget_s: float) -> Batch:
        """A batch whose steps begin within `budget_s` from now (0: no bound)."""
        return cls(time.monotonic() + budget_s if budget_s > 0 else None)

    def stopped(self) -> bool:
        return self.failed or (self.deadline is not None and time.monotonic() > self.deadline)

    def refusal(self) -> TakeLater:
        why = "Redis failed earlier in its batch" if self.failed else \
            "not begun within FEISHU_INGEST_WAIT_MAX_MS of its batch"
        return TakeLater(f"event not taken now: {why}")

    def seen(self, outcome: Outcome) -> Outcome:
        """Note a Redis failure (a RetryableError) among the outcomes; `outcome` back."""
        if isinstance(outcome, RedisUnavailable):
            self.failed = True
        return outcome

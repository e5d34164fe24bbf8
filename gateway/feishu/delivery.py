"""Sending what the bot says: one stable uuid per piece, retried with backoff and jitter for
a bounded budget, honouring Feishu's rate-limit answers, never retrying a rejection."""

from __future__ import annotations

import logging
import random
import threading
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_delay

from gateway.errors import GatewayError, RetryableError
from gateway.feishu.openapi import OpenApi

logger = logging.getLogger(__name__)

_NAMESPACE = uuidlib.UUID("6f1d3c1e-5b0a-4e55-9a51-9d3c8a1f0b7e")


def reply_uuid(message_id: str, purpose: str = "reply", index: int = 0) -> str:
    """The same uuid for every attempt at one piece of one answer: Feishu sends it once.
    Each purpose (reply, failure, gave-up, command, inbox-full) has its own."""
    tag = purpose if index == 0 else f"{purpose}-{index}"
    return str(uuidlib.uuid5(_NAMESPACE, f"{tag}:{message_id}"))


class Abandoned(GatewayError):
    """The sender gave up on purpose: the turn was stopped or lost its lease."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    budget_s: float = 120.0
    """The last attempt starts at most this long after the first (GATEWAY_REPLY_RETRY_BUDGET_S)."""
    base_s: float = 0.5
    cap_s: float = 30.0

    def wait_s(self, attempt: int, error: BaseException | None) -> float:
        """Full-jitter exponential backoff; a rate limit's reset time when Feishu gave one."""
        backoff = random.uniform(self.base_s, max(self.base_s, min(
            self.cap_s, self.base_s * 2 ** (attempt - 1))))
        if isinstance(error, RetryableError) and error.retry_after_s is not None:
            return min(error.retry_after_s, self.cap_s) + random.uniform(0, self.base_s)
        return backoff


def _always() -> bool:
    return True


class Replies:
    """Replies to messages; thread-safe (one per process)."""

    def __init__(self, api: OpenApi, policy: RetryPolicy | None = None) -> None:
        self.api = api
        self.policy = policy or RetryPolicy()

    def send_text(self, message_id: str, text: str, *, uuid: str, in_thread: bool = False,
                  may_send: Callable[[], bool] = _always,
                  stopped: threading.Event | None = None) -> str:
        """Reply with `text`; returns the new message id.

        Raises RejectedError (Feishu refused it: not retried), RetryableError (still failing
        when the budget ran out) or Abandoned (`may_send` said no before an attempt; a set
        `stopped` event cuts a backoff wait short)."""
        attempts = 0
        policy = self.policy

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            left_s = policy.budget_s - (state.seconds_since_start or 0.0)
            return max(min(policy.wait_s(state.attempt_number, error), left_s), 0.0)

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            logger.warning("reply to %s failed (%s); retry %d in %.1fs", message_id, error,
                           state.attempt_number, state.upcoming_sleep)

        interrupt = stopped if stopped is not None else threading.Event()

        def sleeper(seconds: float) -> None:
            interrupt.wait(seconds)

        retrying = Retrying(retry=retry_if_exception_type(RetryableError),
                            stop=stop_after_delay(policy.budget_s), wait=wait,
                            sleep=sleeper, before_sleep=log_retry, reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    attempts += 1
                    if not may_send():
                        raise Abandoned(f"reply to {message_id} abandoned: the turn was "
                                        "stopped or lost its lease")
                    return self.api.reply(message_id, msg_type="text", content={"text": text},
                                          uuid=uuid, in_thread=in_thread)
        except RetryableError as error:
            raise RetryableError(f"{error} (gave up after {attempts} attempts)",
                                 code=error.code) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

"""Sending what the bot says: one stable uuid per piece, retried with backoff and jitter for
a bounded budget, honouring Feishu's rate-limit answers, never retrying a rejection."""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from gateway.core import metrics
from gateway.core.errors import GatewayError, RateLimited, RejectedError, RetryableError
from gateway.feishu.outbound.openapi import TARGET_GONE_CODES, OpenApi
from gateway.feishu.outbound.quota import Interrupt, Quota
from gateway.feishu.outbound.render import forms_to_try, render

logger = logging.getLogger(__name__)

T = TypeVar("T")
_NAMESPACE = uuidlib.UUID("6f1d3c1e-5b0a-4e55-9a51-9d3c8a1f0b7e")


def reply_uuid(message_id: str, purpose: str = "reply", index: int = 0) -> str:
    """The same uuid for every attempt at one piece of one answer: Feishu sends it once.
    Each purpose (reply, failure, gave-up, command, inbox-full) has its own."""
    tag = purpose if index == 0 else f"{purpose}-{index}"
    return str(uuidlib.uuid5(_NAMESPACE, f"{tag}:{message_id}"))


def derived_uuid(uuid: str, tag: str) -> str:
    """A second stable uuid for another form of the same piece (plain text, a new message)."""
    return str(uuidlib.uuid5(_NAMESPACE, f"{tag}:{uuid}"))


class Abandoned(GatewayError):
    """The sender gave up on purpose: the turn was stopped or lost its lease."""


class EitherSet:
    """Set once either event is: a turn's stop or the process leaving (threading waits on
    one event only, so this one waits in short steps)."""

    STEP_S = 0.1

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        self.first, self.second = first, second

    def is_set(self) -> bool:
        return self.first.is_set() or self.second.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left_s = self.STEP_S if deadline is None else deadline - time.monotonic()
            if left_s <= 0:
                return False
            self.first.wait(min(left_s, self.STEP_S))
        return True


class Leaving(Abandoned):
    """This process is shutting down (`Replies.leave`): the piece was not sent, and no
    retry or wait is left to try; the turn is for another worker to send."""


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
    """Replies to messages; thread-safe (one per process). `api` is the first app's open
    API; `others` those of further apps (FEISHU_APPS), by app id."""

    def __init__(self, api: OpenApi, policy: RetryPolicy | None = None, *,
                 others: Mapping[str, OpenApi] | None = None,
                 quota: Quota | None = None) -> None:
        self.api = api
        self.others = dict(others or {})
        self.policy = policy or RetryPolicy()
        self.quota = quota
        """The send quota every attempt draws from (none: unlimited)."""
        self.leaving = threading.Event()
        """Set when the process shuts down (`leave`)."""

    def leave(self) -> None:
        """The process is shutting down: from now on a send makes the attempt it is at,
        without waiting for the quota, and is not retried; what fails raises `Leaving`.
        A send waiting now (a backoff, the quota) wakes at once and makes its last attempt
        (or none, when the quota has no room); a send going well goes on."""
        self.leaving.set()

    def api_for(self, app_id: str) -> OpenApi:
        """The open API of `app_id` ("" or unknown: the first app's)."""
        if app_id and app_id not in self.others and app_id != self.api.app_id:
            logger.warning("no credentials for app %s (FEISHU_APPS); replying as %s", app_id,
                           self.api.app_id)
        return self.others.get(app_id, self.api)

    def send_text(self, message_id: str, text: str, *, uuid: str, in_thread: bool = False,
                  app_id: str = "", chat_id: str = "", may_send: Callable[[], bool] = _always,
                  stopped: threading.Event | None = None) -> str:
        """Reply with `text`; returns the new message id.

        Raises RejectedError (Feishu refused it: not retried), RetryableError (still failing
        when the budget ran out) or Abandoned (`may_send` said no before an attempt; a set
        `stopped` event cuts a backoff wait short)."""
        return self.send(message_id, "text", {"text": text}, uuid=uuid, in_thread=in_thread,
                         app_id=app_id, chat_id=chat_id, may_send=may_send, stopped=stopped)

    def post_text(self, chat_id: str, text: str, *, uuid: str, app_id: str = "",
                  may_send: Callable[[], bool] = _always,
                  stopped: threading.Event | None = None) -> str:
        """Send `text` to the chat as a new message (a greeting: nothing to reply to);
        raises as `send_text`."""
        return self.post(chat_id, "text", {"text": text}, uuid=uuid, app_id=app_id,
                         may_send=may_send, stopped=stopped)

    def post(self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str,
             app_id: str = "", may_send: Callable[[], bool] = _always,
             stopped: threading.Event | None = None) -> str:
        """Send a message of any type to the chat as a new message; raises as `send_text`."""
        api = self.api_for(app_id)
        return self._retrying(f"message to {chat_id}", lambda: api.create(
            chat_id, msg_type=msg_type, content=content, uuid=uuid), app_id=api.app_id,
            chat_id=chat_id, may_send=may_send, stopped=stopped)

    def upload(self, kind: str, name: str, data: bytes, *, file_type: str = "",
               app_id: str = "", stopped: threading.Event | None = None) -> str:
        """Upload an image (`kind` image) or a file for the bot to send, retried as a send
        is (each attempt drawn from the send quota); its key. RejectedError when Feishu
        refuses it or answers no key."""
        api = self.api_for(app_id)
        key = self._retrying(f"upload of {kind} {name}", lambda: api.upload(
            kind, name, data, file_type or "stream"), app_id=api.app_id, stopped=stopped)
        if not key:
            raise RejectedError(f"upload of {kind} {name}: feishu answered no key")
        return key

    def thread_root(self, thread_id: str, *, app_id: str = "",
                    stopped: threading.Event | None = None) -> str:
        """The first message of a thread, which a message posted into the thread replies to
        (retried as a send is); RejectedError when Feishu lists none (gone, or not the
        bot's to see)."""
        api = self.api_for(app_id)
        root = self._retrying(f"the first message of thread {thread_id}",
                              lambda: api.thread_root(thread_id), app_id=api.app_id, low=True,
                              stopped=stopped)
        if not root:
            raise RejectedError(f"thread {thread_id} has no message the bot can see")
        return root

    def post_markdown(self, chat_id: str, text: str, *, mode: str, uuid: str,
                      app_id: str = "", may_send: Callable[[], bool] = _always,
                      stopped: threading.Event | None = None) -> str:
        """`send_markdown` as a new message to the chat."""
        return _in_forms(text, mode, uuid, f"a message to {chat_id}", lambda kind, body, key:
                         self.post(chat_id, kind, body, uuid=key, app_id=app_id,
                                   may_send=may_send, stopped=stopped))

    def send_markdown(self, message_id: str, text: str, *, mode: str, uuid: str,
                      in_thread: bool = False, app_id: str = "", chat_id: str = "",
                      may_send: Callable[[], bool] = _always,
                      stopped: threading.Event | None = None) -> str:
        """Reply with markdown `text` as text, a post or a card (`mode`, see render.py);
        when Feishu refuses the rich form, the same text goes again as plain text (under
        its own stable uuid). Raises as `send_text`."""
        return _in_forms(text, mode, uuid, f"the reply to {message_id}", lambda kind, body, key:
                         self.send(message_id, kind, body, uuid=key, in_thread=in_thread,
                                   app_id=app_id, chat_id=chat_id, may_send=may_send,
                                   stopped=stopped))

    def send(self, message_id: str, msg_type: str, content: dict[str, Any], *, uuid: str,
             in_thread: bool = False, app_id: str = "", chat_id: str = "",
             may_send: Callable[[], bool] = _always,
             stopped: threading.Event | None = None) -> str:
        """Reply with a message of any type (a card: "interactive"); see `send_text`. When
        the message replied to was withdrawn or is gone (230011, 231003) and `chat_id` is
        given, the answer goes to the chat as a new message instead."""
        api = self.api_for(app_id)
        try:
            return self._retrying(f"reply to {message_id}", lambda: api.reply(
                message_id, msg_type=msg_type, content=content, uuid=uuid,
                in_thread=in_thread), app_id=api.app_id, chat_id=chat_id,
                may_send=may_send, stopped=stopped)
        except RejectedError as error:
            if not chat_id or error.code not in TARGET_GONE_CODES:
                raise
            logger.info("message %s is gone (%s); the answer goes to chat %s as a new "
                        "message", message_id, error, chat_id)
        return self._retrying(f"message to {chat_id}", lambda: api.create(
            chat_id, msg_type=msg_type, content=content, uuid=derived_uuid(uuid, "new")),
            app_id=api.app_id, chat_id=chat_id, may_send=may_send, stopped=stopped)

    def update_card(self, card_message_id: str, card: dict[str, Any], *, app_id: str = "",
                    chat_id: str = "", budget_s: float | None = None) -> None:
        """Replace the content of a card the bot sent (PATCH), retried like a reply (for
        `budget_s`, when given)."""
        api = self.api_for(app_id)
        self._retrying(f"card {card_message_id}", lambda: api.patch_card(card_message_id, card),
                       app_id=api.app_id, chat_id=chat_id, budget_s=budget_s)

    def call(self, what: str, call: Callable[[OpenApi], T], *, app_id: str = "",
             chat_id: str = "", low: bool = False, budget_s: float | None = None,
             may_send: Callable[[], bool] = _always,
             stopped: threading.Event | None = None) -> T:
        """Any other open API call of `app_id`'s (CardKit), retried and drawn from the
        quota like a reply (`low`: at the low priority, for streaming updates)."""
        api = self.api_for(app_id)
        return self._retrying(what, lambda: call(api), app_id=api.app_id, chat_id=chat_id,
                              low=low, budget_s=budget_s, may_send=may_send, stopped=stopped)

    def _retrying(self, what: str, call: Callable[[], T], *, app_id: str, chat_id: str = "",
                  low: bool = False, may_send: Callable[[], bool] = _always,
                  stopped: threading.Event | None = None, budget_s: float | None = None) -> T:
        """`call` until it succeeds, is rejected or the budget runs out; each attempt first
        draws from the send quota (`low`: at the low priority) and a rate-limited answer
        holds the app's quota for every worker. Once the process is leaving, a failed
        attempt is not retried and no attempt waits for the quota: `Leaving` is raised."""
        attempts = 0
        failure: RetryableError | None = None
        """The last answer that failed: the reason given when the quota has no room left."""
        started = time.monotonic()
        policy = self.policy if budget_s is None else RetryPolicy(
            budget_s, self.policy.base_s, self.policy.cap_s)

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            left_s = policy.budget_s - (state.seconds_since_start or 0.0)
            return max(min(policy.wait_s(state.attempt_number, error), left_s), 0.0)

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            logger.warning("%s failed (%s); retry %d in %.1fs", what, error,
                           state.attempt_number, state.upcoming_sleep)
            metrics.send_retried()

        interrupt: Interrupt = (self.leaving if stopped is None
                                else EitherSet(stopped, self.leaving))

        def sleeper(seconds: float) -> None:
            interrupt.wait(seconds)

        def retried(error: BaseException) -> bool:
            return isinstance(error, RetryableError) and not self.leaving.is_set()

        retrying = Retrying(retry=retry_if_exception(retried),
                            stop=stop_after_delay(policy.budget_s), wait=wait,
                            sleep=sleeper, before_sleep=log_retry, reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    attempts += 1
                    if not may_send():
                        raise Abandoned(f"{what} abandoned: the turn was stopped or lost "
                                        "its lease")
                    left_s = policy.budget_s - (time.monotonic() - started)
                    if not self._draw(app_id, chat_id, low, interrupt, left_s):
                        raise self._no_room(what, interrupt, failure)
                    try:
                        return call()
                    except RetryableError as error:
                        failure = error
                        if isinstance(error, RateLimited) and self.quota is not None:
                            self.quota.hold(app_id, error.retry_after_s or 1.0)
                        raise
        except RetryableError as error:
            if self.leaving.is_set():
                raise self._left(what, error) from None
            raise RetryableError(f"{error} (gave up after {attempts} attempts)",
                                 code=error.code) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _draw(self, app_id: str, chat_id: str, low: bool, stopped: Interrupt,
              left_s: float) -> bool:
        """Whether the send quota gave this attempt its tokens within `left_s` (at once,
        once the process is leaving)."""
        if self.leaving.is_set():
            left_s = 0.0
        return self.quota is None or self.quota.acquire(
            app_id, chat_id, low=low, stopped=stopped, timeout_s=max(left_s, 0.0))

    @staticmethod
    def _left(what: str, failure: RetryableError | None = None) -> Leaving:
        why = f" (last: {failure})" if failure is not None else ""
        return Leaving(f"{what} not sent: this process is shutting down{why}")

    def _no_room(self, what: str, stopped: Interrupt,
                 failure: RetryableError | None) -> GatewayError:
        """Why an attempt the quota had no room for ends: the process is leaving, the turn
        was stopped, or the budget ran out. Then the reason is what Feishu last answered,
        when it answered at all: a wait for the quota is no failure of its own."""
        if self.leaving.is_set():
            return self._left(what, failure)
        if stopped.is_set():
            return Abandoned(f"{what} abandoned: the turn was stopped")
        if failure is not None:
            return failure
        return RateLimited(f"{what}: the send quota had no room within the retry budget")


def _in_forms(text: str, mode: str, uuid: str, what: str,
              send: Callable[[str, dict[str, Any], str], str]) -> str:
    """Send markdown `text` in the first form of `mode` Feishu takes (render.py), each form
    under its own stable uuid; `send(msg_type, content, uuid)` sends one."""
    forms = forms_to_try(text, mode)
    for form in forms:
        rendered = render(text, form)
        try:
            return send(rendered.msg_type, rendered.content,
                        uuid if form == forms[0] else derived_uuid(uuid, form))
        except RejectedError as error:
            if form == forms[-1]:
                raise
            logger.warning("feishu refused the %s form of %s (%s); sending it as plain text",
                           form, what, error)
    raise AssertionError("unreachable: the last form returns or raises")

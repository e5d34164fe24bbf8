"""Reading one page of a chat's messages back from the list API, for catch-up: drawn from
the app's send quota at low priority (so replies keep their share), retried with backoff
and jitter on anything that may pass (network errors, 5xx whatever the body, rate limits,
honouring Feishu's reset time), never on a refusal. The lease is renewed before every
attempt, so a long wait never lets another listener take over by mistake."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from gateway.core.errors import GatewayError, RejectedError, RetryableError
from gateway.feishu.inbound.listed import Page, page_of, query_window
from gateway.feishu.outbound.openapi import OpenApi
from gateway.feishu.outbound.quota import Quota

logger = logging.getLogger(__name__)

ATTEMPTS = 6
BASE_S = 0.5
CAP_S = 10.0
QUOTA_WAIT_S = 30.0


class LeaseLost(GatewayError):
    """Another listener holds the app's catch-up now (or a new gap started it over)."""


class Stopping(GatewayError):
    """The listener is stopping: the catch-up is left where its progress says."""


def backoff_s(attempt: int, error: RetryableError, rng: random.Random) -> float:
    """Full-jitter exponential backoff; Feishu's reset time when it gave one."""
    if error.retry_after_s is not None:
        return min(max(error.retry_after_s, 0.1), 60.0)
    return rng.uniform(0, min(CAP_S, BASE_S * 2 ** attempt))


class ChatPages:
    def __init__(self, apis: Callable[[str], OpenApi], quota: Quota | None, *, page_size: int,
                 stopping: threading.Event, rng: random.Random | None = None) -> None:
        self._apis, self._quota = apis, quota
        self.page_size = page_size
        self._stopping = stopping
        self._rng = rng or random.Random()

    def feishu_now_ms(self, app_id: str) -> int | None:
        """Feishu's clock now, as the app's open API last said it (None: not yet)."""
        return self._apis(app_id).feishu_now_ms()

    def page(self, app_id: str, chat_id: str, since_ms: int, until_ms: int, token: str,
             renew: Callable[[], bool]) -> Page:
        """The page of `chat_id`'s messages created in [since_ms, until_ms] (Feishu's
        clock) that `token` names ('' the first). RejectedError when Feishu refuses (the bot
        left the chat, a token that expired); RetryableError once ATTEMPTS failed;
        LeaseLost, Stopping."""
        start_s, end_s = query_window(since_ms, until_ms)
        api = self._apis(app_id)
        last: RetryableError | None = None
        for attempt in range(ATTEMPTS):
            if self._stopping.is_set():
                raise Stopping("the listener is stopping")
            if not renew():
                raise LeaseLost(f"catch-up of app {app_id} is no longer this listener's")
            if self._quota is not None:
                if not self._quota.acquire(app_id, low=True, patient=True,  # (after replies)
                                           stopped=self._stopping, timeout_s=QUOTA_WAIT_S):
                    continue  # stopping (checked above), or no room yet: try again
                if not renew():  # the quota's wait may have been long
                    raise LeaseLost(f"catch-up of app {app_id} is no longer this listener's")
            try:
                return page_of(api.list_messages(chat_id, start_s=start_s, end_s=end_s,
                                                 page_size=self.page_size, page_token=token))
            except RejectedError:
                raise
            except RetryableError as error:
                last = error
                wait_s = backoff_s(attempt, error, self._rng)
                logger.info("catch-up: messages of chat %s not read (%s); again in %.1fs",
                            chat_id, error, wait_s)
                self._stopping.wait(wait_s)
        raise RetryableError(f"messages of chat {chat_id} not read after {ATTEMPTS} attempts: "
                             f"{last or 'no room in the send quota'}")

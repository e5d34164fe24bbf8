"""The "Typing" reaction on a user's message while its turn runs, removed after, and a
failure mark when the turn failed. Sent off the turn's path by one thread per process,
one attempt each: a refusal or a rate limit is logged once and never retried (quota is
for replies).

A "Typing" reaction draws from the send quota at the low priority: while replies wait for
the quota, or with no room soon, it is skipped (as is one whose turn ended before its turn
came). Its removal and the failure mark draw as replies do: a "Typing" left on an answered
message would be a lie, and there are only as many as were added while no reply waited.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from gateway.core.errors import GatewayError, RateLimited, Yielded
from gateway.feishu.outbound.openapi import OpenApi
from gateway.feishu.outbound.quota import Quota

logger = logging.getLogger(__name__)

QUEUE_CAP = 1000
ADD_WAIT_S = 0.5
"""A "Typing" reaction waits at most this long for the quota (it is skipped after)."""
REMOVE_WAIT_S = 30.0
"""A reaction's removal (and a failure mark) waits this long for the quota, as a reply."""


@dataclass
class Typing:
    """One turn's reaction: filled in by the typist's thread."""

    message_id: str
    app_id: str
    chat_id: str = ""
    reaction_id: str = ""
    ended: bool = False
    """The turn ended: a reaction not added yet is not added any more."""


class Typist:
    def __init__(self, api_for: Callable[[str], OpenApi], *, emoji: str = "Typing",
                 failure_emoji: str = "CrossMark", quota: Quota | None = None) -> None:
        self._api_for = api_for
        self._quota = quota
        self.emoji, self.failure_emoji = emoji, failure_emoji
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue(QUEUE_CAP)
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def begin(self, message_id: str, app_id: str = "", chat_id: str = "") -> Typing:
        typing = Typing(message_id, app_id, chat_id)
        self._submit(lambda: self._add(typing))
        return typing

    def end(self, typing: Typing, *, failed: bool) -> None:
        """Remove the reaction (after it was added: one thread, in order); mark a failure."""
        typing.ended = True
        self._submit(lambda: self._remove(typing, failed))

    def _submit(self, job: Callable[[], None]) -> None:
        with self._guard:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gateway-typing",
                                                daemon=True)
                self._thread.start()
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            logger.debug("typing reaction skipped: %d waiting already", QUEUE_CAP)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except RateLimited as error:
                logger.info("typing reaction skipped, rate limited: %s", error)
            except GatewayError as error:
                logger.info("typing reaction skipped: %s", error)
            except Exception:  # the thread's boundary: it must go on
                logger.exception("typing reaction failed")

    def _room(self, typing: Typing, api: OpenApi, wait_s: float, *, low: bool = True) -> bool:
        try:
            if self._quota is None or self._quota.acquire(
                    api.app_id, typing.chat_id, low=low, timeout_s=wait_s):
                return True
        except Yielded:
            logger.debug("typing reaction on %s skipped: replies are waiting for the send "
                         "quota", typing.message_id)
            return False
        logger.debug("typing reaction on %s skipped: the send quota is busy",
                     typing.message_id)
        return False

    def _react(self, typing: Typing, api: OpenApi, emoji: str) -> str:
        try:
            return api.add_reaction(typing.message_id, emoji)
        except RateLimited as error:
            if self._quota is not None:
                self._quota.hold(api.app_id, error.retry_after_s or 1.0)
            raise

    def _add(self, typing: Typing) -> None:
        if typing.ended:
            return
        api = self._api_for(typing.app_id)
        if self._room(typing, api, ADD_WAIT_S):
            typing.reaction_id = self._react(typing, api, self.emoji)

    def _remove(self, typing: Typing, failed: bool) -> None:
        api = self._api_for(typing.app_id)
        try:
            if typing.reaction_id and self._room(typing, api, REMOVE_WAIT_S, low=False):
                api.delete_reaction(typing.message_id, typing.reaction_id)
        finally:
            if failed and self.failure_emoji and self._room(typing, api, REMOVE_WAIT_S,
                                                            low=False):
                self._react(typing, api, self.failure_emoji)

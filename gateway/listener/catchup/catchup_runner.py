"""The listener's catch-up thread: it beats for every app whose long connection is up (what
a gap is measured from, on Redis's clock), and works the catch-up a gap planned when it
gets the app's lease: the chats active lately, newest first, each read back page by page,
oldest message first, every message fed through the intake as a pushed one would be
(dedupe, admission, ingest), flagged as caught up. Progress is saved after every page, so
a listener that dies leaves the rest to the next one (once its lease ran out).

A thread of its own (never the connection's loop); any failure is one line and a later try.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from gateway.chats.active import ActiveChat, ActiveChats
from gateway.core.errors import GatewayError, RejectedError
from gateway.core.loops import describe
from gateway.feishu.inbound.listed import create_ms, event_of, skipped
from gateway.listener.catchup.catchup_book import CatchupBook, Job, encode_chats
from gateway.listener.catchup.pages import ChatPages, LeaseLost, Stopping

logger = logging.getLogger(__name__)

Feed = Callable[[Mapping[str, Any], str], str]
"""(a message event's payload, app_id) → what the intake did with it (caught up)."""
RETRY_AFTER_S = 15.0
SHIFT_NOTED_MS = 5_000
"""Feishu's clock further than this from Redis's is worth a line."""
"""An app whose catch-up failed is tried again after this."""


@dataclass(frozen=True)
class Limits:
    window_ms: int
    max_chats: int
    max_pages: int
    beat_s: float


class CatchUpRunner:
    def __init__(self, book: CatchupBook, actives: ActiveChats, pages: ChatPages, feed: Feed,
                 limits: Limits, *, connected: Callable[[], list[str]],
                 ready: Callable[[str], bool], stopping: threading.Event) -> None:
        """`connected`: the apps whose long connection is up now; `ready(app)`: whether
        admission can judge its messages (the bot's identity is known)."""
        self.book, self.actives, self.pages, self.feed = book, actives, pages, feed
        self.limits = limits
        self._connected, self._ready = connected, ready
        self._stopping = stopping
        self._poke = threading.Event()
        self._has_work = threading.Event()
        self._pending: tuple[str, ...] = ()
        self._not_before: dict[str, float] = {}
        # beats go on while a catch-up works: a long one is no gap of its own
        self._threads = [
            threading.Thread(target=self._loop, args=(self._poke, self.beat_round),
                             name="gateway-catchup-beat", daemon=True),
            threading.Thread(target=self._loop, args=(self._has_work, self.work_round),
                             name="gateway-catchup", daemon=True)]

    def start(self) -> CatchUpRunner:
        for thread in self._threads:
            thread.start()
        return self

    def poke(self) -> None:
        """A connection changed state: beat now (safe on any thread, the loop's too)."""
        self._poke.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._poke.set()
        self._has_work.set()
        for thread in self._threads:
            thread.join(timeout_s)

    def _loop(self, wake: threading.Event, step: Callable[[], None]) -> None:
        while not self._stopping.is_set():
            wake.wait(self.limits.beat_s)
            wake.clear()
            if self._stopping.is_set():
                return
            try:
                step()
            except redis.RedisError as error:
                logger.warning("catch-up: round skipped, redis unavailable: %s", error)
            except Exception as error:  # noqa: BLE001 (a thread's boundary: it must go on)
                logger.error("catch-up: round failed, going on: %s", describe(error))

    def work_round(self) -> None:
        for app_id in self._pending:
            if self._ready(app_id) and time.monotonic() >= self._not_before.get(app_id, 0.0):
                self.work(app_id)

    def beat_round(self) -> None:
        """Beat for every connected app; the apps with a pending catch-up are worked on the
        other thread."""
        pending = []
        for app_id in self._connected():
            waiting, gap_ms = self.book.beat(app_id, self.pages.feishu_now_ms(app_id))
            if gap_ms is not None and gap_ms < 0:
                logger.info("catch-up of app %s: no earlier connection is remembered, so no "
                            "gap is known and nothing is read back", app_id)
            elif gap_ms is not None:
                logger.warning("catch-up of app %s planned: no listener was connected for "
                               "%.0fs", app_id, gap_ms / 1000)
            if waiting:
                pending.append(app_id)
        self._pending = tuple(pending)
        if pending:
            self._has_work.set()

    def work(self, app_id: str) -> None:
        job = self.book.take(app_id)
        if job is None:
            return
        try:
            self._catch_up(app_id, job)
        except LeaseLost as error:
            logger.info("catch-up of app %s left to its progress: %s", app_id, error)
        except Stopping:
            logger.info("catch-up of app %s left to its progress: the listener stops", app_id)
            self._release(app_id, job)
        except (GatewayError, redis.RedisError) as error:
            self._not_before[app_id] = time.monotonic() + RETRY_AFTER_S
            logger.warning("catch-up of app %s paused (%s); it goes on from its progress in "
                           "%.0fs", app_id, error, RETRY_AFTER_S)
            self._release(app_id, job)

    def _release(self, app_id: str, job: Job) -> None:
        """Let the lease go, so another listener may go on at once (else it runs out)."""
        try:
            self.book.release(app_id, job)
        except redis.RedisError as error:
            logger.info("catch-up lease of app %s not released (%s): it runs out", app_id,
                        error)

    def _plan(self, app_id: str, job: Job) -> tuple[ActiveChat, ...]:
        seconds, micros = self.book.redis.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        chats = tuple(self.actives.recent(app_id, now_ms - self.limits.window_ms,
                                          self.limits.max_chats))
        if not self.book.save(app_id, job, chats=encode_chats(chats), next=0, token="",
                              pages=0):
            raise LeaseLost(f"catch-up of app {app_id} is no longer this listener's")
        logger.info("catch-up of app %s: %d chat(s) active in the window to read back",
                    app_id, len(chats))
        return chats

    def _window(self, app_id: str, job: Job) -> tuple[int, int]:
        """The job's gap on Feishu's clock, which the messages' create_time is on: as it
        was planned when the beat knew Feishu's clock; else measured on Redis's, and the
        two may differ by a step of either (a VM resumed, a failover): the difference is
        read from Feishu's last answer (its Date), and a step back of Redis's clock since
        the gap was found moves its start back as far. It only ever widens the window (a
        few duplicates more cost nothing)."""
        if job.clock == "feishu":
            return job.since_ms, job.until_ms
        feishu_ms = self.pages.feishu_now_ms(app_id)
        seconds, micros = self.book.redis.time()
        redis_ms = int(seconds) * 1000 + int(micros) // 1000
        back_ms = min(redis_ms - job.planned_ms, 0)  # (Redis's clock went back since)
        if feishu_ms is None:
            return job.since_ms + back_ms, job.until_ms
        shift_ms = feishu_ms - redis_ms
        if abs(shift_ms) > SHIFT_NOTED_MS:
            logger.warning("catch-up of app %s: Feishu's clock is %+.0fs from Redis's; the gap "
                           "is read on Feishu's", app_id, shift_ms / 1000)
        return job.since_ms + min(shift_ms, 0) + back_ms, job.until_ms + max(shift_ms, 0)

    def _catch_up(self, app_id: str, job: Job) -> None:
        chats = job.chats if job.chats is not None else self._plan(app_id, job)
        window = self._window(app_id, job)
        nxt, token, pages = (job.next, job.token, job.pages) if job.chats is not None \
            else (0, "", 0)
        outcomes: Counter[str] = Counter()
        began = time.monotonic()
        for index in range(nxt, len(chats)):
            self._read_chat(app_id, job, window, index, chats[index], token, pages, outcomes)
            token, pages = "", 0
            self._save(app_id, job, next=index + 1, token="", pages=0)
        if self.book.done(app_id, job):
            logger.info("catch-up of app %s done in %.1fs: %d chat(s) read, %s", app_id,
                        time.monotonic() - began, len(chats) - nxt,
                        ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items()))
                        or "nothing missed")

    def _save(self, app_id: str, job: Job, **fields: Any) -> None:
        if not self.book.save(app_id, job, **fields):
            raise LeaseLost(f"catch-up of app {app_id} is no longer this listener's")

    def _read_chat(self, app_id: str, job: Job, window: tuple[int, int], index: int,
                   chat: ActiveChat, token: str, pages: int, outcomes: Counter[str]) -> None:
        """Read one chat from page `token` on (`pages` of it read so far), feeding each
        message created in `window` (Feishu's clock); progress saved after each page."""
        while pages < self.limits.max_pages:
            try:
                page = self.pages.page(app_id, chat.chat_id, *window, token,
                                       lambda: self.book.save(app_id, job))
            except RejectedError as error:
                if not token:
                    logger.warning("catch-up: chat %s skipped: %s", chat.chat_id, error)
                    return
                logger.info("catch-up: chat %s read again from its start (%s)", chat.chat_id,
                            error)
                token = ""  # an expired page token: what was fed already is a duplicate
                continue
            for item in page.items:
                outcomes[self._feed(app_id, chat, window, item)] += 1
            pages += 1
            token = page.token if page.has_more else ""
            if not token:
                return
            self._save(app_id, job, next=index, token=token, pages=pages)
        logger.warning("catch-up: chat %s has more than %d pages of messages in the gap; the "
                       "rest is not read back (FEISHU_CATCHUP_MAX_PAGES)", chat.chat_id,
                       self.limits.max_pages)

    def _feed(self, app_id: str, chat: ActiveChat, window: tuple[int, int],
              item: Mapping[str, Any]) -> str:
        created = create_ms(item)
        if not window[0] <= created <= window[1]:
            return "outside the gap"
        why = skipped(item)
        if why:
            logger.debug("catch-up: message %s of chat %s skipped: %s",
                         item.get("message_id"), chat.chat_id, why)
            return "skipped"
        return self.feed(event_of(item, chat.chat_type), app_id)

"""The listener's wiring: the shared collaborators (gateway/runtime.py), plus what only a
listener runs: the intake of events, the outbox publishing for it, the desk of control jobs
with the verdicts of approval clicks, and the sweeper. Built from the settings, started and
stopped by the service (gateway/listener/service.py)."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from gateway.approvals.submits import FormSubmits
from gateway.approvals.verdicts import Verdicts
from gateway.chats.active import ActiveChats
from gateway.chats.jobs import ControlJobs
from gateway.chats.store_settings import keyspace
from gateway.chats.sweeper import Sweeper
from gateway.core.lazy import cached_property
from gateway.core.redis_client import redis_client
from gateway.listener.catchup.catchup_book import CatchupBook
from gateway.listener.catchup.catchup_runner import CatchUpRunner, Limits
from gateway.listener.catchup.pages import ChatPages
from gateway.listener.chat_changes import Welcomes
from gateway.listener.desk import ControlDesk
from gateway.listener.feedback import ReactionDesk, ReactionIntake
from gateway.listener.intake import Intake
from gateway.listener.menu import MenuDesk, MenuIntake
from gateway.listener.outbox import Outbox
from gateway.listener.stop_button import StopButton
from gateway.runtime import Runtime

ORPHAN_AFTER_MS = 10_000
"""A control job nobody touched for this long was left by a dead listener (desks touch
theirs every 2 s)."""


class ListenerRuntime(Runtime):
    def card_closer(self) -> Executor | None:
        """A thread of its own: closing a card never holds up the control desk."""
        return ThreadPoolExecutor(1, thread_name_prefix="gateway-card-closer")

    @cached_property
    def verdicts(self) -> Verdicts:
        """Card clicks and /approve, /deny."""
        s = self.settings
        return Verdicts(self.approvals, admins=s.admin_ids, allowed=s.allowed_user_ids)

    @cached_property
    def control_jobs(self) -> ControlJobs:
        """A client of its own: its reads block for up to half a second."""
        s = self.settings
        client = redis_client(s.redis_url, s.redis_timeout_s + 2.0, retries=0,
                              cluster=s.redis_cluster)
        consumer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        return ControlJobs(client, consumer, orphan_after_ms=ORPHAN_AFTER_MS,
                           streams=keyspace(s).controls)

    @cached_property
    def desk(self) -> ControlDesk:
        return ControlDesk(self.control_jobs, self.canceller, self.replies, self.store,
                           verdicts=self.verdicts, reactions=ReactionDesk(
                               self.store, self.replies, self.publisher.publish_reaction,
                               primary_app_id=self.settings.primary_app_id),
                           menu=MenuDesk(self.replies, lambda payload, app_id:
                                         self.intake.receive_in_order(payload, app_id)))

    @cached_property
    def outbox(self) -> Outbox:
        return Outbox(cap=self.settings.outbox_cap)

    @cached_property
    def intake(self) -> Intake:
        s = self.settings
        return Intake(self.store, self.publisher, self.outbox, max_text_chars=s.max_text_chars,
                      primary_app_id=s.primary_app_id, several_apps=len(s.apps) > 1,
                      hooks=(ReactionIntake(self.store), MenuIntake(self.store, s.menu_items)),
                      clicks=(StopButton(self.store, admins=s.admin_ids,
                                         allowed=s.allowed_user_ids).on_click,
                              FormSubmits(self.approvals, admins=s.admin_ids,
                                          allowed=s.allowed_user_ids).on_click,
                              self.verdicts.on_click),
                      rules=s.admission_rules, refusal_notice_every_s=s.refusal_notice_every_s,
                      welcomes=Welcomes(s.welcome_group, s.welcome_dm), ingest=s)

    @cached_property
    def sweeper(self) -> Sweeper:
        return Sweeper(self.store, self.publisher, self.settings.sweep_interval_s)

    def catchup(self, connected: Callable[[], list[str]]) -> CatchUpRunner:
        """Catch-up after an outage (gateway/listener/catchup/): `connected` names the apps
        whose long connection is up now."""
        s = self.settings
        beat_s = min(5.0, s.catchup_after_s / 4)
        book = CatchupBook(self.redis, self.process_id, after_ms=int(s.catchup_after_s * 1000),
                           window_ms=int(s.catchup_window_s * 1000),
                           margin_ms=int((beat_s + 10) * 1000),
                           lease_ms=int(min(max(s.catchup_after_s, 3.0), 30.0) * 1000))
        stopping = threading.Event()
        pages = ChatPages(self.replies.api_for, self.quota, page_size=s.catchup_page_size,
                          stopping=stopping)
        intake = self.intake

        def feed(payload: Mapping[str, Any], app_id: str) -> str:
            return intake.receive(payload, app_id=app_id, caught_up=True)

        limits = Limits(window_ms=int(s.catchup_window_s * 1000),
                        max_chats=s.catchup_max_chats, max_pages=s.catchup_max_pages,
                        beat_s=beat_s)
        return CatchUpRunner(book, ActiveChats(self.redis, keyspace(s)), pages, feed, limits,
                             connected=connected,
                             ready=lambda app_id: bool(intake.bot_open_ids.get(app_id)),
                             stopping=stopping)

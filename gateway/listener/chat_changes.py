"""The listener's step for an event about messages and chats after the fact: a message
withdrawn or edited by its sender, the bot added to or removed from a group, a user opening
its direct chat. One Redis step each (gateway/chats/change_steps.py), on the ingest thread like a
message's; a greeting enters the chat's inbox as a message does (dedupe by event id, the
turn path sends it: a worker, through the send quota), never from here."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.chats.change_steps import Change
from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.core import metrics
from gateway.core.errors import MalformedEvent
from gateway.core.logs import shown
from gateway.core.model import Message
from gateway.core.rules import Rules
from gateway.feishu.inbound import change_events as ev
from gateway.feishu.inbound.admission import may_greet
from gateway.feishu.inbound.change_events import CHANGES

logger = logging.getLogger(__name__)

Ingest = Callable[[Message], str]
"""Admit a message to its chat's inbox (Intake's step); returns what happened."""
Tag = Callable[[Message, str], Message]
"""The message as tagged with the app it came to (Intake's rule)."""


@dataclass(frozen=True)
class Welcomes:
    """What the bot says once on its own (FEISHU_WELCOME_GROUP, FEISHU_WELCOME_DM; empty:
    nothing)."""

    group: str = ""
    """In a group it was added to."""
    dm: str = ""
    """To a user who opens its direct chat for the first time."""


@dataclass
class ChatChanges:
    """An event hook (gateway/listener/event_hooks.py): messages and chats after the fact."""

    event_types = CHANGES
    store: ChatStore
    publish: Callable[[TurnRef], None]
    ingest: Ingest
    tag: Tag
    bot_open_ids: Mapping[str, str]
    max_text_chars: int = 16_000
    welcomes: Welcomes = Welcomes()
    rules: Rules = field(default_factory=Rules)
    """Who may talk to the bot: no greeting where it would answer nobody."""

    def handle(self, event_type: str, payload: Mapping[str, Any], app_id: str) -> str:
        """One such event, judged and stored; returns what was done (the metric's outcome).
        A malformed one is one line and dropped (ACKed); a Redis failure propagates (ACK
        500: Feishu delivers it again, and every step is idempotent)."""
        event_id = shown((payload.get("header") or {}).get("event_id", "?"))  # for logs
        try:
            if event_type == ev.UPDATED:
                outcome = self._edited(payload, app_id)
            else:
                outcome = self._chat_event(event_type, ev.parse_chat_event(payload), app_id)
        except MalformedEvent as error:
            logger.warning("event %s dropped: %s", event_id, error)
            outcome = "malformed"
        metrics.changed(event_type.removeprefix("im."), outcome)
        return outcome

    def _chat_event(self, event_type: str, chat: ev.ChatEvent, app_id: str) -> str:
        state = self.store.keyspace.scope.of(chat.chat_id, app_id)  # this bot's (scope.py)
        if event_type == ev.RECALLED:
            change = self.store.changes.withdraw(state, chat.message_id)
            logger.info("message %s of chat %s withdrawn by its sender: %s", chat.message_id,
                        state, _said(change))
            return self._went_on(change)
        if event_type == ev.BOT_REMOVED:
            changes = self.store.changes.evict_all(state, chat.at_ms)  # (its topics' too)
            for change in changes:
                self._went_on(change)
            logger.info("bot removed from chat %s: %d waiting message(s) dropped, turn %s%s",
                        state, sum(c.dropped for c in changes), changes[0].how,
                        f" ({len(changes) - 1} topic(s) too)" if len(changes) > 1 else "")
            return changes[0].how
        if event_type == ev.BOT_ADDED:
            return self._greet(chat, self.welcomes.group, "group", app_id)
        if chat.last_message_id:  # (P2P_ENTERED) not a first visit
            logger.debug("direct chat %s opened again: no greeting", chat.chat_id)
            return "returning"
        return self._greet(chat, self.welcomes.dm, "p2p", app_id)

    def _went_on(self, change: Change) -> str:
        if change.following is not None:
            self.publish(change.following)
        return change.how

    def _greet(self, chat: ev.ChatEvent, text: str, chat_type: str, app_id: str) -> str:
        what = "added to group" if chat_type == "group" else "direct chat opened:"
        if not text:
            logger.info("bot %s %s (no greeting set)", what, chat.chat_id)
            return "no-greeting"
        if not may_greet(self.rules, chat_type, chat.chat_id, chat.operator_open_id):
            logger.info("bot %s %s (not greeted: its policy lets nobody talk there)", what,
                        chat.chat_id)
            return "not-greeted"
        logger.info("bot %s %s: greeting queued", what, chat.chat_id)
        return self.ingest(self.tag(ev.greeting(chat, text, chat_type), app_id))

    def _edited(self, payload: Mapping[str, Any], app_id: str) -> str:
        message, update_ms = ev.parse_edit(payload, bot_open_id=self.bot_open_ids.get(app_id, ""),
                                           max_text_chars=self.max_text_chars)
        outcome = self.store.changes.revise(self.tag(message, app_id), update_ms)
        line = {"revised": "its new text will be answered", "kept": "kept for when it comes",
                "started": "already answered or being answered: no second answer",
                "answered": "already answered or being answered: no second answer",
                "older": "an older edit: ignored"}.get(outcome, outcome)
        logger.info("message %s of chat %s edited by its sender: %s", message.message_id,
                    message.chat_id, line)
        return outcome


def _said(change: Change) -> str:
    return {"dropped": "dropped from the inbox", "claimed": "dropped before its turn started",
            "idle": "dropped before its turn started", "stopping": "its running turn stops",
            "unknown": "not waiting (it will never be answered if it comes)"}.get(
        change.how, change.how)

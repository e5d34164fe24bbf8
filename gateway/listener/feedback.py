"""Reactions as feedback, the listener's part.

On the ingest thread (`ReactionIntake`): a person's reaction event becomes a control job in
one Redis step (deduped by event id), so it is recorded before it is ACKed; a reaction an
app made (this bot's own typing mark) is ACKed and dropped. On the control desk
(`ReactionDesk`): the reacted message is read (Feishu's event does not name the chat); a
message that is not this bot's answer is ignored with one line; an answer's reaction is
recorded on the turn it answered (`feishu-gateway chat` shows it), counted by emoji, and
handed to the agent factory's `on_reaction` hook as a low-priority task, outside any chat's
order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from gateway.chats.jobs import ControlJob
from gateway.chats.store import ChatStore
from gateway.core import metrics
from gateway.core.errors import MalformedEvent, RejectedError
from gateway.core.logs import shown
from gateway.core.model import Reaction
from gateway.feishu.inbound.reaction_events import REACTION_EVENTS, emoji_label, parse_reaction
from gateway.feishu.outbound.delivery import Replies

logger = logging.getLogger(__name__)

READ_BUDGET_S = 5.0
"""The desk reads the reacted message within this (retried), then leaves the job for later
(taken again some 10 s on): a desk thread is never held long by feedback."""


class ReactionIntake:
    """An event hook (gateway/listener/event_hooks.py): a person's reaction noted."""

    event_types = REACTION_EVENTS

    def __init__(self, store: ChatStore) -> None:
        self._store = store

    def handle(self, event_type: str, payload: Mapping[str, Any], app_id: str) -> str:
        """One reaction event: `noted`, `duplicate`, `app` (an app's own: dropped) or
        `malformed` (one line, dropped). A Redis failure propagates (ACK 500: Feishu
        delivers it again)."""
        outcome = self._note(event_type, payload, app_id)
        metrics.changed("reaction", outcome)
        return outcome

    def _note(self, event_type: str, payload: Mapping[str, Any], app_id: str) -> str:
        try:
            event = parse_reaction(event_type, payload)
        except MalformedEvent as error:
            logger.warning("reaction event dropped: %s", error)
            return "malformed"
        if not event.by_user:
            logger.debug("reaction %s on %s by an app (the bot's own mark): ignored",
                         event.emoji, event.message_id)
            return "app"
        outcome = self._store.feedback.note_reaction(app_id, event.event_id, event.message_id,
                                            event.emoji, event.added, event.by, event.at_ms)
        logger.info("reaction %s %s on %s by %s: %s", event.emoji,
                    "added" if event.added else "removed", event.message_id, shown(event.by),
                    outcome)
        return outcome


HookSender = Callable[[Reaction], None]
"""Sends the `on_reaction` task (raises on a broker failure: the job is taken again)."""


class ReactionDesk:
    def __init__(self, store: ChatStore, replies: Replies, send_hook: HookSender, *,
                 primary_app_id: str = "") -> None:
        self._store, self._replies, self._send_hook = store, replies, send_hook
        self._primary = primary_app_id

    def perform(self, job: ControlJob) -> None:
        """A `reaction` job: read whose message it is, record, count, hand to the hook."""
        app_id = job.app or self._primary
        try:
            items = self._replies.call(
                f"reacted message {job.task}",
                lambda api: api.get_message(job.task), app_id=job.app, low=True,
                budget_s=READ_BUDGET_S)
        except RejectedError as error:  # (deleted, or not in a chat the bot is in)
            logger.info("reaction %s on %s ignored: the message cannot be read (%s)", job.why,
                        shown(job.task), error)
            return
        item = next((i for i in items if i.get("message_id") == job.task), None)
        sender = item.get("sender") if item is not None else None
        if not isinstance(sender, Mapping) or sender.get("sender_type") != "app" \
                or sender.get("id") != app_id:
            logger.info("reaction %s on %s ignored: not a message this bot sent", job.why,
                        shown(job.task))
            return
        assert item is not None
        chat_id, thread_id = str(item.get("chat_id") or ""), str(item.get("thread_id") or "")
        reaction = Reaction(chat_id, job.task, str(item.get("parent_id") or ""), job.why,
                            job.command == "added", job.target, job.sent_ms,
                            "" if job.app == self._primary else job.app, thread_id)
        state = self._store.keyspace.scope.of(chat_id, job.app, thread_id)
        recorded = self._store.feedback.record_reaction(state, reaction.turn_message_id, job.why,
                                               reaction.added, job.target, job.sent_ms)
        self._send_hook(reaction)
        metrics.reacted(emoji_label(job.why), "added" if reaction.added else "removed")
        logger.info("reaction %s %s on the answer to %s in chat %s by %s: %s", job.why,
                    job.command, shown(reaction.turn_message_id or "?"), shown(state),
                    shown(job.target), recorded)

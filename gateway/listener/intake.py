"""The listener's one step per event: decode, judge (admission), ingest in one Redis step,
hand off.

Runs on a connection's ingest thread (the ACK waits for it), so it does exactly one Redis
round trip and never touches the broker or Feishu's APIs: publishing goes to the outbox
thread; commands and notices ("late", "inbox full") are recorded in Redis by that same step,
and the control desk acts on them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import redis

from gateway.chats.model import NotDurable, TurnRef
from gateway.chats.store import ChatStore
from gateway.core import metrics
from gateway.core.errors import MalformedEvent, RetryableError
from gateway.core.logs import turn_context
from gateway.core.model import Message
from gateway.core.rules import Rules
from gateway.feishu.inbound.admission import Arrival, admit
from gateway.feishu.inbound.changes import CHANGES
from gateway.feishu.inbound.events import arrival_of, parse_command, parse_message
from gateway.listener.changes import ChatChanges
from gateway.listener.outbox import Outbox
from gateway.publisher import Publisher

logger = logging.getLogger(__name__)

MESSAGE_EVENT = "im.message.receive_v1"
CARD_EVENT = "card.action.trigger"
CardHandler = Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None]


class NotYetJudged(RetryableError):
    """A message admission cannot judge yet (the bot's identity is unknown, so neither an
    @mention of it nor its own messages can be told): its frame is not ACKed as handled,
    and Feishu delivers it again."""


def decode_event(payload: bytes) -> tuple[str, Mapping[str, Any]] | None:
    """(event_type, event) of a frame's JSON payload, or None (logged) when it is not one."""
    try:
        event = json.loads(payload)
    except (ValueError, RecursionError) as error:  # (UnicodeDecodeError is a ValueError)
        logger.warning("event frame dropped: not JSON (%s)", error)
        return None
    if not isinstance(event, dict):
        logger.warning("event frame dropped: not a JSON object")
        return None
    header = event.get("header")
    kind = header.get("event_type") if isinstance(header, dict) else None
    if not isinstance(kind, str):
        logger.warning("event frame dropped: no header.event_type")
        return None
    return kind, event


class Intake:
    def __init__(self, store: ChatStore, publisher: Publisher, outbox: Outbox, *,
                 max_text_chars: int, primary_app_id: str = "", several_apps: bool = False,
                 cards: CardHandler | None = None, stops: CardHandler | None = None,
                 rules: Rules | None = None,
                 refusal_notice_every_s: int = 86_400, welcome_group: str = "",
                 welcome_dm: str = "") -> None:
        self._store = store
        self._publisher = publisher
        self._outbox = outbox
        self.max_text_chars = max_text_chars
        self.primary_app_id = primary_app_id
        self.several_apps = several_apps
        """Tag every message with its app (not only those of the further apps), so a worker
        configured with another first app still replies as the right one."""
        self.bot_open_ids: dict[str, str] = {}
        self.cards = cards
        self.stops = stops
        self.rules = rules or Rules(require_mention=False)
        self.refusal_notice_every_s = refusal_notice_every_s
        self.changes = ChatChanges(store, self._publish, self._greeting, self._tag,
                                   self.bot_open_ids, max_text_chars, welcome_group, welcome_dm,
                                   self.rules)

    def on_frame(self, app_id: str, kind: str, payload: bytes) -> Mapping[str, Any] | None:
        """A connection's frame handler: a message event is received, an event about
        messages and chats after the fact goes to `changes`, a card click to `cards` (its
        answer is the callback's answer); anything else is ACKed and dropped with one DEBUG
        line, and counted by type."""
        decoded = decode_event(payload)
        if decoded is None:
            return None
        event_type, event = decoded
        try:
            if event_type == MESSAGE_EVENT:
                outcome = "error"
                try:
                    outcome = self.receive(event, app_id=app_id)
                except NotYetJudged:
                    outcome = "unjudged"
                    raise
                finally:
                    metrics.event(outcome)
                return None
            if event_type in CHANGES:
                self.changes.handle(event_type, event, app_id)
                return None
            if event_type == CARD_EVENT:  # a streaming card's Stop button, or an approval's
                for handler in (self.stops, self.cards):
                    answer = None if handler is None else handler(app_id, event)
                    if answer is not None:
                        return answer
                return None
        except redis.RedisError as error:  # ACK 500: Feishu delivers it again
            raise RetryableError(f"Redis unavailable: {error}") from None
        logger.debug("event of type %r not handled (frame type %s)", event_type, kind)
        metrics.unhandled(event_type[:100])
        return None

    def receive(self, payload: Mapping[str, Any], *, app_id: str = "",
                caught_up: bool = False) -> str:
        """One `im.message.receive_v1` payload: judged by admission, then ingested; returns
        what happened to it. `caught_up`: read back after an outage (catch-up), not pushed.

        A malformed event is logged in one line and dropped (its ACK still goes back);
        a Redis failure, or a message that cannot be judged before the bot's identity is
        known (NotYetJudged), propagates, so the ACK says 500 and Feishu redelivers."""
        event_id = str((payload.get("header") or {}).get("event_id", "?"))
        bot_open_id = self.bot_open_ids.get(app_id, "")
        arrival = arrival_of(payload)
        verdict = admit(arrival, self.rules, bot_open_id)
        if verdict.code == "identity-unknown":
            raise NotYetJudged(f"event {event_id} in chat {arrival.chat_id or '?'} waits: "
                               f"{verdict.reason}")
        if not verdict.admitted:
            metrics.refused(verdict.code or "other")
            return self._refused(payload, event_id, arrival, verdict.reason, verdict.tell,
                                 bot_open_id, app_id)
        try:
            message = parse_message(payload, bot_open_id=bot_open_id,
                                    max_text_chars=self.max_text_chars)
        except MalformedEvent as error:
            logger.warning("event %s dropped: %s", event_id, error)
            return "malformed"
        message = self._tag(message, app_id)
        if caught_up:
            message = replace(message, caught_up=True)
        with turn_context(self._store.keyspace.scope.of_message(message), message.message_id):
            return self._ingest(message)

    def _tag(self, message: Message, app_id: str) -> Message:
        """The message tagged with the app it came to, when a worker needs to know it."""
        if app_id and (self.several_apps or app_id != self.primary_app_id):
            return replace(message, app_id=app_id)
        return message

    def _greeting(self, message: Message) -> str:
        with turn_context(self._store.keyspace.scope.of_message(message), message.message_id):
            return self._ingest(message, command="")

    def _ingest(self, message: Message, command: str | None = None) -> str:
        """The admitted message's one Redis step, and its hand-off."""
        if command is None:
            command = parse_command(message.text) or ""
        if self._outbox.full():  # the broker is not taking tasks: Feishu keeps the event
            raise RetryableError(f"message {message.message_id} not taken: the outbox is full "
                                 f"({self._outbox.cap} publishes wait for the broker)")
        try:
            admission = self._store.ingest(message, command,
                                           busy=self.rules.busy_of(message.chat_id),
                                           app_id=message.app_id or self.primary_app_id)
        except NotDurable as error:  # ACK 500 (Feishu redelivers), but publish what it did
            if error.admission.claimed is not None:
                self._publish(error.admission.claimed)
            raise
        chat = self._store.keyspace.scope.of_message(message)  # (with several apps, its app)
        if admission.outcome == "late":
            what = "a command read back after an outage" if command and message.caught_up \
                else f"{admission.late_ms / 60_000:.0f} min late"
            logger.warning("message %s of chat %s arrived %s: %s", message.message_id,
                           chat, what, "dropped"
                           if self._store.config.late_events == "drop" else "told so, not run")
        elif admission.outcome == "command":
            logger.info("command /%s in chat %s (message %s)", command, chat,
                        message.message_id)
        else:
            logger.debug("message %s of chat %s: %s (%d waiting)", message.message_id,
                        chat, admission.outcome, admission.waiting)
        if admission.claimed is not None:
            self._publish(admission.claimed)
        return admission.outcome

    def _refused(self, payload: Mapping[str, Any], event_id: str, arrival: Arrival,
                 reason: str, tell: bool, bot_open_id: str, app_id: str) -> str:
        """One line (DEBUG for group chatter that did not address the bot, INFO else);
        a refused person in a DM is told so, at most once per `refusal_notice_every_s`."""
        level = logging.DEBUG if "without an @mention" in reason or arrival.sender_type != \
            "user" else logging.INFO
        logger.log(level, "event %s in chat %s from %s refused: %s", event_id,
                   arrival.chat_id or "?", arrival.sender_open_id or "?", reason)
        if tell and self.refusal_notice_every_s > 0:
            try:
                message = parse_message(payload, bot_open_id=bot_open_id,
                                        max_text_chars=self.max_text_chars)
            except MalformedEvent:
                return "refused"
            # told by the bot it was sent to, once per that bot's state of the chat
            self._store.refuse(self._tag(message, app_id), reason, self.refusal_notice_every_s)
        return "refused"

    def _publish(self, turn: TurnRef) -> None:
        self._outbox.submit(lambda: self._publisher.publish(turn))

"""The listener's one step per event: decode, judge (admission), ingest in one Redis step,
hand off.

Runs on a connection's ingest thread (the ACK waits for it), so it does exactly one Redis
round trip (for the message events that arrived together, `on_frames`: one pipelined round
trip for them all) and never touches the broker or Feishu's APIs: publishing goes to the
outbox thread; commands and notices ("late", "inbox full") are recorded in Redis by that
same step, and the control desk acts on them.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import redis

from gateway.broker.publisher import Publisher
from gateway.chats.inbox import Entry
from gateway.chats.store import ChatStore
from gateway.chats.store_types import Admission, NotDurable, TurnRef
from gateway.core import metrics
from gateway.core.errors import RetryableError, TakeLater
from gateway.core.ingest_settings import IngestSettings
from gateway.core.logs import shown, turn_context
from gateway.core.model import Message
from gateway.core.rules import Rules
from gateway.feishu.gate import answer_or_error
from gateway.feishu.inbound.events import chat_of, decode_event, parse_command
from gateway.feishu.inbound.read import MALFORMED, UNJUDGED, Refusal, read
from gateway.listener.batch import Batch, Outcome, redis_failure
from gateway.listener.chat_changes import ChatChanges, Welcomes
from gateway.listener.event_hooks import EventHook, by_type
from gateway.listener.outbox import Coalescing, Outbox
from gateway.listener.refused import Refused, chat_of_payload, first, kept_of

logger = logging.getLogger(__name__)

MESSAGE_EVENT = "im.message.receive_v1"
CARD_EVENT = "card.action.trigger"
CardHandler = Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None]
OPEN = Rules(require_mention=False)
"""Everyone may talk to the bot, anywhere, without an @mention (a bare intake's rules)."""
NO_WELCOMES = Welcomes()
UNBOUNDED = IngestSettings.model_construct(ingest_wait_max_ms=0, ingest_group_max=64,
                                           ingest_later_cap=0)  # (no environment read)
"""A bare intake's steps: no wait bound, no refused event kept (FEISHU_INGEST_*)."""


class NotYetJudged(TakeLater):
    """A message admission cannot judge yet (the bot's identity is unknown, so neither an
    @mention of it nor its own messages can be told): its frame is not ACKed as handled,
    and it is taken later, once the identity is known."""


class OutboxFull(TakeLater):
    """The broker is not taking turns (GATEWAY_OUTBOX_CAP publishes wait): a message is not
    taken now, but later, once the outbox drained."""


class Intake:
    def __init__(self, store: ChatStore, publisher: Publisher, outbox: Outbox, *,
                 max_text_chars: int, primary_app_id: str = "", several_apps: bool = False,
                 hooks: Sequence[EventHook] = (), clicks: Sequence[CardHandler] = (),
                 rules: Rules = OPEN, refusal_notice_every_s: int = 86_400,
                 welcomes: Welcomes = NO_WELCOMES, ingest: IngestSettings = UNBOUNDED) -> None:
        self._store = store
        self.batch_budget_s = ingest.ingest_wait_max_ms / 1000
        """A batch's steps begin within this (FEISHU_INGEST_WAIT_MAX_MS; 0: no bound)."""
        self.refused = Refused(ingest.ingest_later_cap)
        """The refused events, kept to take later (refused.py)."""
        self._later_at_once = ingest.ingest_group_max
        self._one_at_a_time = threading.Lock()  # (the kept events: one step at a time)
        self._publisher = publisher
        self._outbox = outbox
        self._turns_out: Coalescing[TurnRef] = Coalescing(outbox, publisher.publish_many)
        self.max_text_chars = max_text_chars
        self.primary_app_id = primary_app_id
        self.several_apps = several_apps
        """Tag every message with its app (not only those of the further apps), so a worker
        configured with another first app still replies as the right one."""
        self.bot_open_ids: dict[str, str] = {}
        self.clicks = tuple(clicks)
        """A card click's handlers, asked in order until one answers (a card's Stop, a
        form's submit, an approval's button)."""
        self.rules = rules
        self.refusal_notice_every_s = refusal_notice_every_s
        self.changes = ChatChanges(store, self._publish, self._greeting, self._tag,
                                   self.bot_open_ids, max_text_chars, welcomes, self.rules)
        self._hooks = by_type((self.changes, *hooks))
        """The step of each event type besides a message (event_hooks.py)."""

    def on_frame(self, app_id: str, kind: str, payload: bytes) -> Mapping[str, Any] | None:
        """A connection's frame handler: a message event is received, any other event goes
        to the hook naming its type (chat changes, reactions, the menu), a card click to
        `clicks` (the first answer is the callback's answer); anything else is ACKed and
        dropped with one DEBUG line, and counted by type."""
        decoded = decode_event(payload)
        if isinstance(decoded, str):
            logger.warning("event frame dropped: %s", decoded)
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
            hook = self._hooks.get(event_type)
            if hook is not None:
                hook.handle(event_type, event, app_id)
                return None
            if event_type == CARD_EVENT and self.clicks:  # a card's Stop, a form's, an approval's
                for handler in self.clicks:  # (the approvals' handler says what it ignored)
                    answer = handler(app_id, event)
                    if answer is not None:
                        return answer
                return None
        except redis.RedisError as error:  # ACK 500: taken later (a click: clicked again)
            if event_type == CARD_EVENT:
                raise RetryableError(f"Redis unavailable: {error}") from None
            raise redis_failure(error) from None
        logger.debug("event of type %r not handled (frame type %s)", event_type, kind)
        metrics.unhandled(event_type)
        return None

    def on_frames(self, app_id: str, frames: Sequence[tuple[str, bytes]]) -> list[Outcome]:
        """A connection's step: the app's refused events kept to take later first, then
        `frames` (refused.py `first`); each frame's answer, or the error that answers it 500
        (TakeLater: it is kept to take later)."""
        return first(self.refused, app_id, frames, self._frames, self._later_at_once)

    def on_push(self, app_id: str, kind: str, payload: bytes) -> Mapping[str, Any] | None:
        """Webhook mode's step of one push: refused (and kept) while an event of its chat
        is kept (`take_kept` takes those); else the event, as a frame."""
        if self.refused.holds(app_id, chat_of_payload(payload)):
            raise TakeLater("behind a message of its chat kept to take later")
        return self.on_frame(app_id, kind, payload)

    def take_kept(self) -> bool:
        """Take the events kept to take later, every app's, in one step each (webhook mode:
        the server's, now and then; a stop): whether any was taken."""
        with self._one_at_a_time:
            before = len(self.refused)
            for app_id in self.refused.apps():
                first(self.refused, app_id, [], self._frames, self._later_at_once)
            return len(self.refused) < before

    def _frames(self, app_id: str, frames: Sequence[tuple[str, bytes]],
                earlier: int) -> list[Outcome]:
        """`on_frame` for frames taken together (group commit), the first `earlier` of them
        refused before and taken now: the message events among them are ingested in one
        round trip, in order; any other event runs on its own, in its place. A message of a
        chat that has an event kept to take later, or one refused in this step, is refused
        too (TakeLater): it waits behind it. Each gets its answer, or its error."""
        results: list[Outcome] = [None] * len(frames)
        batch = Batch.within(self.batch_budget_s)
        waiting: list[tuple[int, Entry]] = []
        behind: set[str] = set()
        ahead = Counter(k.chat for _, payload in frames[:earlier] if (k := kept_of(payload)))
        for n, (kind, payload) in enumerate(frames):
            if batch.stopped():  # not begun in time, or Redis failed this batch already
                metrics.event("error")
                results[n] = batch.refusal()
                continue
            decoded = decode_event(payload)
            if isinstance(decoded, str) or decoded[0] != MESSAGE_EVENT:
                self._ingest_many(waiting, results, batch)
                results[n] = batch.seen(answer_or_error(functools.partial(
                    self.on_frame, app_id, kind, payload)))
                continue
            chat = chat_of(decoded[1])
            if chat is not None and (chat in behind or (
                    n >= earlier and self.refused.holds(app_id, chat, besides=ahead[chat]))):
                results[n] = TakeLater(f"behind a message of chat {shown(chat)} kept to take "
                                       "later")
                continue
            try:
                judged = self._judge(decoded[1], app_id)
                if isinstance(judged, str):
                    metrics.event(judged)
                    continue
                waiting.append((n, self._entry(judged)))
            except NotYetJudged as error:
                metrics.event("unjudged")
                results[n] = error
            except redis.RedisError as error:  # (telling a refused person)
                metrics.event("error")
                results[n] = batch.seen(redis_failure(error))
            except Exception as error:  # noqa: BLE001 (one frame's boundary: its ACK says 500)
                metrics.event("error")
                results[n] = error
            if isinstance(results[n], TakeLater) and chat is not None:
                behind.add(chat)
        self._ingest_many(waiting, results, batch)
        return results

    def _ingest_many(self, waiting: list[tuple[int, Entry]], results: list[Outcome],
                     batch: Batch) -> None:
        """The waiting messages' one round trip and hand-offs; `waiting` is emptied."""
        if not waiting:
            return
        admissions: list[Admission | Exception]
        if batch.stopped():
            admissions = [batch.refusal() for _ in waiting]
        else:
            admissions = self._store.inbox.ingest_many([entry for _, entry in waiting],
                                                 deadline=batch.deadline)
        for (n, entry), admission in zip(waiting, admissions, strict=True):
            message = entry.message
            outcome = "error"
            with turn_context(self._store.keyspace.scope.of_message(message),
                              message.message_id):
                try:
                    if isinstance(admission, NotDurable):
                        if admission.admission.claimed is not None:
                            self._publish(admission.admission.claimed)
                        raise admission
                    if isinstance(admission, redis.RedisError):
                        raise redis_failure(admission)
                    if isinstance(admission, Exception):
                        raise admission
                    outcome = self._admitted(message, entry.command, admission)
                except Exception as error:  # noqa: BLE001 (one frame's boundary: ACK 500)
                    results[n] = batch.seen(error)
                finally:
                    metrics.event(outcome)
        waiting.clear()

    def receive_in_order(self, payload: Mapping[str, Any], app_id: str) -> str:
        """`receive`, for a message made after the fact (a menu click's echo): TakeLater
        while an event of its chat is kept to take later, so it never overtakes it."""
        chat = chat_of(payload)
        if chat is not None and self.refused.holds(app_id, chat):
            raise TakeLater(f"behind a message of chat {shown(chat)} kept to take later")
        return self.receive(payload, app_id=app_id)

    def receive(self, payload: Mapping[str, Any], *, app_id: str = "",
                caught_up: bool = False) -> str:
        """One `im.message.receive_v1` payload: judged by admission, then ingested; returns
        what happened to it. `caught_up`: read back after an outage (catch-up), not pushed.

        A malformed event is logged in one line and dropped (its ACK still goes back);
        a Redis failure, or a message that cannot be judged before the bot's identity is
        known (NotYetJudged), propagates, so the ACK says 500 and Feishu redelivers."""
        judged = self._judge(payload, app_id, caught_up)
        if isinstance(judged, str):
            return judged
        with turn_context(self._store.keyspace.scope.of_message(judged), judged.message_id):
            return self._ingest(judged)

    def _judge(self, payload: Mapping[str, Any], app_id: str,
               caught_up: bool = False) -> Message | str:
        """The message to ingest (tagged with its app), or what happened to it instead
        (refused, malformed); NotYetJudged while the bot's identity is unknown."""
        event_id = shown((payload.get("header") or {}).get("event_id", "?"))  # for logs
        reading = read(payload, self.rules, self.bot_open_ids.get(app_id, ""),
                       max_text_chars=self.max_text_chars)
        if isinstance(reading, Message):
            message = self._tag(reading, app_id)
            return replace(message, caught_up=True) if caught_up else message
        if reading.code == UNJUDGED:
            raise NotYetJudged(f"event {event_id} in chat {shown(reading.arrival.chat_id or '?')}"
                               f" waits: {shown(reading.reason)}")
        if reading.code == MALFORMED:
            logger.warning("event %s dropped: %s", event_id, reading.reason)
            return "malformed"
        metrics.refused(reading.code)
        return self._refused(event_id, reading, app_id)

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
        entry = self._entry(message, command)
        try:
            admission = self._store.inbox.ingest(entry.message, entry.command, busy=entry.busy,
                                           app_id=entry.app_id)
        except NotDurable as error:  # ACK 500 (Feishu redelivers), but publish what it did
            if error.admission.claimed is not None:
                self._publish(error.admission.claimed)
            raise
        return self._admitted(message, entry.command, admission)

    def _entry(self, message: Message, command: str | None = None) -> Entry:
        """What the ingest step takes for the admitted message; RetryableError while the
        outbox is full (the broker is not taking tasks: Feishu keeps the event)."""
        if command is None:
            command = parse_command(message.text) or ""
        if self._outbox.full():
            raise OutboxFull(f"message {message.message_id} not taken now: the outbox is full "
                             f"({self._outbox.cap} publishes wait for the broker)")
        return Entry(message, command, self.rules.busy_of(message.chat_id),
                     message.app_id or self.primary_app_id)

    def _admitted(self, message: Message, command: str, admission: Admission) -> str:
        """The hand-off of what the ingest step did: its line, the turn it claimed
        published; its outcome."""
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

    def _refused(self, event_id: str, refusal: Refusal, app_id: str) -> str:
        """One line (DEBUG for group chatter that did not address the bot, INFO else);
        a refused person in a DM is told so, at most once per `refusal_notice_every_s`."""
        arrival, reason = refusal.arrival, refusal.reason
        level = logging.DEBUG if "without an @mention" in reason or arrival.sender_type != \
            "user" else logging.INFO
        logger.log(level, "event %s in chat %s from %s refused: %s", event_id,
                   shown(arrival.chat_id or "?"), shown(arrival.sender_open_id or "?"),
                   shown(reason, max_chars=200))
        if refusal.tell and refusal.message is not None and self.refusal_notice_every_s > 0:
            # told by the bot it was sent to, once per that bot's state of the chat
            self._store.inbox.refuse(self._tag(refusal.message, app_id), reason,
                               self.refusal_notice_every_s)
        return "refused"

    def _publish(self, turn: TurnRef) -> None:
        """On the outbox thread: the turns claimed meanwhile go out in one round trip."""
        self._turns_out.submit(turn)

"""Sending a turn's answer: its pieces, the surface a streamed answer grows on, the give-up.

An answer is cut into pieces of at most `chunk_chars`, each sent as a message under a uuid
fixed by the answer's kind and the piece's position, so a re-run resends the same pieces
(Feishu shows them once). A streamed answer grows on a card, or on a text or post message
edited in place; its first piece closes that surface, the rest follow as replies. A piece
Feishu refuses, or that still fails once its retries are spent, is recorded as undelivered
(`feishu-gateway status` lists it) and the chat moves on; so is one to a chat the bot
was removed from (230002: never retried). A greeting is sent to its chat as a new message,
and so is a message the bot starts (into its thread: a reply in the thread to the thread's
first message).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, TurnRef
from gateway.chats.streams import StreamCards
from gateway.core.errors import GatewayError
from gateway.core.media import parse_media_piece
from gateway.core.model import GREETING, OUTBOUND, OUTBOUND_CARD, Message
from gateway.feishu.outbound.chunking import chunk_markdown
from gateway.feishu.outbound.delivery import Abandoned, Leaving, Replies, reply_uuid
from gateway.feishu.outbound.openapi import BOT_NOT_IN_CHAT
from gateway.feishu.outbound.stream_card import INTERRUPTED_MARK, stop_value, stopped_mark
from gateway.worker.handles import SHUTDOWN, TurnHandle
from gateway.worker.media_sender import content_of
from gateway.worker.streaming import FAILED_MARK, Stream
from gateway.worker.surfaces import CardSurface, EditedMessage, Surface

logger = logging.getLogger(__name__)

LATE_ANSWER_NOTE = "(Answered late: this message was sent while the bot was offline.)"
"""What opens the answer to a message read back after an outage (docs/design.md#catch-up)."""
HANDED_OVER_NOTE = "↻ This worker is restarting: another one answers here."
"""Under a streamed answer whose worker left mid-answer: the re-run takes it up."""


FAILURE_REPLY = "Sorry, something went wrong while answering this message."


def gave_up_reply(attempts: int) -> str:
    return (f"Sorry, this message could not be answered: {attempts} attempts to answer it "
            "were cut off. The chat goes on with your next message.")


def piece_content(chunk: str, kind: str) -> tuple[str, dict[str, Any]] | None:
    """A piece sent as it is: an uploaded image or file, or the card of a message the bot
    starts (`kind` OUTBOUND_CARD): its msg_type and content; None for markdown."""
    media = parse_media_piece(chunk)
    if media is not None:
        return content_of(media[0], media[1])
    if kind == OUTBOUND_CARD:
        return "interactive", json.loads(chunk)
    return None


@dataclass(frozen=True)
class AnswerSender:
    """The answers of one worker's turns, sent as `TurnRunner` configures them."""

    store: ChatStore
    replies: Replies
    reply_format: str
    chunk_chars: int
    streams: StreamCards | None
    stream_interval_s: float

    def answer(self, reply: str, *, late: bool = False, media: tuple[str, ...] = ()) -> Answer:
        """An agent's reply as the answer kept and sent: its text cut into pieces, then its
        uploaded images and files (`media`: media pieces); `late` (the message was read
        back after an outage) opens it with `LATE_ANSWER_NOTE`."""
        text = f"{LATE_ANSWER_NOTE}\n\n{reply}" if late else reply
        texts = tuple(chunk_markdown(text, self.chunk_chars)) if text.strip() else ()
        return Answer("reply", texts + media)

    def outbound(self, message: Message) -> Answer:
        """A message the bot starts, as the answer its turn sends: markdown cut into pieces,
        or a card whole (gateway/chats/outbound.py)."""
        if message.message_type == OUTBOUND_CARD or parse_media_piece(message.text):
            return Answer(message.message_type, (message.text,))  # (one piece: a card, a file)
        return Answer(OUTBOUND, tuple(chunk_markdown(message.text, self.chunk_chars)))

    def stream(self, turn: TurnRef, message: Message, attempt: int,
               handle: TurnHandle) -> Stream | None:
        """Where the answer to `message` grows while its agent runs: a message edited in
        place (reply_format text or post) or a card; None when nothing streams."""
        if self.streams is None or self.stream_interval_s <= 0:
            return None

        def may_send() -> bool:  # (a turn its leaving worker stopped still says so)
            return (not handle.stopped.is_set() or handle.reason == SHUTDOWN) \
                and self.store.turns.may_reply(turn)

        surface: Surface
        if self.reply_format in ("text", "post"):
            surface = EditedMessage(self.replies, message, form=self.reply_format,
                                    attempt=attempt, may_send=may_send, stopped=handle.stopped)
        else:
            surface = CardSurface(self.replies, self.streams, message, attempt=attempt,
                                  may_send=may_send, stopped=handle.stopped,
                                  stop=stop_value(turn.chat_id, turn.message_id,
                                                  message.sender_open_id, message.chat_type),
                                  turn=turn)
        return Stream(surface, what=f"message {message.message_id} of chat {message.chat_id}",
                      interval_s=self.stream_interval_s, limit_chars=self.chunk_chars,
                      stopped=handle.stopped)

    def card_kept(self, message: Message, attempt: int) -> bool:
        """A run again of an answer that an earlier attempt streamed into a card (its worker
        left or died mid-answer): the card is taken up and closed by this run's answer,
        whether it streams or not, never left showing the earlier run's text."""
        if attempt <= 1 or self.streams is None or self.reply_format in ("text", "post"):
            return False
        return self.streams.card_of(self.streams.chat_of(message), message.reply_key) \
            is not None

    def streamed(self, turn: TurnRef, stream: Stream, answer: Answer | None, outcome: str,
                 handle: TurnHandle) -> Answer | None:
        """The answer of a turn whose card streamed: closed at once with a mark when the
        turn was stopped (interrupted by a new message, busy mode interrupt) or failed,
        else kept as a "stream" answer (its first chunk closes the card, the rest follow as
        replies)."""
        if handle.stopped.is_set():
            if handle.reason == SHUTDOWN:  # handed back: the re-run takes the surface up
                stream.handed_over(HANDED_OVER_NOTE)
            else:
                self.close_stopped(turn, stream)
            return None
        if outcome == "failed":
            stream.close(stream.text, FAILED_MARK)
            return answer
        if answer is None:
            stream.close(stream.text)
            return None
        if parse_media_piece(answer.chunks[0]) is not None:  # no text: images or files only
            stream.close(stream.text or "…")
            return Answer("reply", answer.chunks)
        return Answer("stream", answer.chunks)

    def _post(self, message: Message, kind: str, chunk: str, uuid: str, reply_to: str,
              may_send: Callable[[], bool], handle: TurnHandle) -> None:
        """One piece of a message the bot starts: into its thread (a reply in the thread to
        the thread's first message, `reply_to`), or to its chat as a new message."""
        as_is = piece_content(chunk, kind)
        if as_is is not None:
            msg_type, content = as_is
            if reply_to != message.message_id:
                self.replies.send(reply_to, msg_type, content, uuid=uuid, in_thread=True,
                                  app_id=message.app_id, may_send=may_send,
                                  stopped=handle.stopped)
            else:
                self.replies.post(message.chat_id, msg_type, content, uuid=uuid,
                                  app_id=message.app_id, may_send=may_send,
                                  stopped=handle.stopped)
        elif reply_to != message.message_id:
            self.replies.send_markdown(reply_to, chunk, mode=self.reply_format, uuid=uuid,
                                       in_thread=True, app_id=message.app_id,
                                       may_send=may_send, stopped=handle.stopped)
        else:
            self.replies.post_markdown(message.chat_id, chunk, mode=self.reply_format, uuid=uuid,
                                       app_id=message.app_id, may_send=may_send,
                                       stopped=handle.stopped)

    def close_stopped(self, turn: TurnRef, stream: Stream) -> None:
        """Close a stopped turn's card with its mark (who stopped it, or interrupted), and
        note that it shows the stop. Not when the turn only lost its lease: its re-run
        streams into the same card and closes it."""
        if stream.live and self.store.turns.asked_to_stop(turn):
            interrupted = self.store.turns.interrupted(turn)
            shown = stream.close(stream.text, INTERRUPTED_MARK if interrupted
                                 else stopped_mark(self.store.clicks.stopped_by(turn.chat_id,
                                                                         turn.fence)))
            if shown and not interrupted:  # the stop's command is answered with a reaction
                self.store.clicks.note_stop_shown(turn.chat_id, turn.fence)

    def send(self, turn: TurnRef, message: Message, answer: Answer, handle: TurnHandle,
             attempt: int, stream: Stream | None = None) -> None:
        """Send every piece; each piece's uuid is fixed by the answer's kind and position.
        Before each attempt the fence is checked again (the first one was just checked).
        A streamed answer's first piece closes its card (the same card on a re-run). When
        the worker leaves meanwhile, the turn stops with `SHUTDOWN` (to be handed back)."""
        checked = [True]
        chunks, purpose, first = answer.chunks, answer.kind, 0
        if purpose == "stream" and stream is None:  # a re-run resending a kept answer
            stream = self.stream(turn, message, attempt, handle)
        if purpose == "stream" and stream is not None:
            if stream.close(chunks[0]):
                first = 1
            elif self.replies.leaving.is_set():  # the card may close yet: on the re-run
                handle.stop(SHUTDOWN)
                return
        if purpose == "stream":
            purpose = "stream-rest"

        def may_send() -> bool:
            if handle.stopped.is_set():
                return False
            fresh, checked[0] = checked[0], False
            return fresh or self.store.turns.may_reply(turn)

        reply_to = message.message_id
        for index, chunk in enumerate(chunks[first:], first):
            uuid = reply_uuid(message.reply_key, purpose, index)
            try:
                if purpose == GREETING:  # said to the chat: there is no message to reply to
                    self.replies.post_text(message.chat_id, chunk, uuid=uuid,
                                           app_id=message.app_id, may_send=may_send,
                                           stopped=handle.stopped)
                    continue
                if purpose in (OUTBOUND, OUTBOUND_CARD):
                    if message.thread_id and reply_to == message.message_id:
                        reply_to = self.replies.thread_root(
                            message.thread_id, app_id=message.app_id, stopped=handle.stopped)
                    self._post(message, purpose, chunk, uuid, reply_to, may_send, handle)
                    continue
                as_is = piece_content(chunk, purpose)
                if as_is is not None:  # an uploaded image or file: sent, never uploaded again
                    msg_type, content = as_is
                    self.replies.send(message.message_id, msg_type, content, uuid=uuid,
                                      in_thread=bool(message.thread_id), app_id=message.app_id,
                                      chat_id=message.chat_id, may_send=may_send,
                                      stopped=handle.stopped)
                    continue
                self.replies.send_markdown(
                    message.message_id, chunk, mode=self.reply_format, app_id=message.app_id,
                    chat_id=message.chat_id, uuid=uuid, in_thread=bool(message.thread_id),
                    may_send=may_send, stopped=handle.stopped)
            except Leaving as error:
                logger.info("%s", error)
                handle.stop(SHUTDOWN)  # unless it was stopped for another reason already
                return
            except Abandoned as error:
                logger.info("%s", error)
                return
            except GatewayError as error:
                if getattr(error, "code", None) in BOT_NOT_IN_CHAT:
                    logger.warning("reply to %s not sent: the bot is no longer in chat %s (%s)",
                                   message.message_id, message.chat_id, error)
                else:
                    logger.error("reply to %s in chat %s given up: %s", message.message_id,
                                 message.chat_id, error)
                self.store.record_undelivered(turn.chat_id, message.message_id, answer.kind,
                                              str(error))
                return

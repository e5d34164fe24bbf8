"""Immutable records of what the simulator saw: messages, frames, ACKs, card answers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.simulator.cards import CardView
from gateway.simulator.payloads import flatten_text


@dataclass(frozen=True)
class SentMessage:
    """A message the bot sent or replied through the open APIs (current content); also the
    parsed view of any message the simulator knows (`Simulator.get_message`)."""

    message_id: str
    chat_id: str
    msg_type: str
    content: dict[str, Any]
    text: str
    reply_to: str | None = None
    uuid: str | None = None
    in_thread: bool = False
    updated: bool = False
    root_id: str | None = None
    thread_id: str | None = None
    history: tuple[dict[str, Any], ...] = ()
    at: float = 0.0
    """When the open API created it (time.time(), for latency figures)."""
    app_id: str | None = None
    """The app whose bot sent it (for a user's message: the app it was delivered to)."""
    card_id: str | None = None
    """The card entity it shows; `content` and `text` are then that card's, as it is now."""
    streaming: bool = False
    """The card entity is in streaming mode."""
    card_updates: int = 0
    """Update calls that changed its card entity."""


@dataclass(frozen=True)
class Ack:
    """A data-frame ACK the client sent back; data is the decoded handler return, if any."""

    frame_message_id: str
    code: int
    latency_ms: float
    data: dict[str, Any] | None = None
    biz_rt_ms: int | None = None
    message_id: str | None = None
    at: float = 0.0
    """When the ACK arrived (time.time())."""


@dataclass(frozen=True)
class CardResponse:
    """The client's answer to one card.action.trigger frame, as Feishu judges it.

    Feishu waits `limit` (3 s) for it: a late answer shows the clicker an error and is
    otherwise ignored (its card does not replace the clicked message)."""

    frame_id: str
    code: int
    data: dict[str, Any] | None
    toast: dict[str, Any] | None
    card: dict[str, Any] | None
    latency_ms: float
    late: bool


@dataclass(frozen=True)
class MessageRecord:
    """Any message the simulator knows: delivered to the bot or sent by it."""

    message_id: str
    chat_id: str
    msg_type: str
    content: str
    from_bot: bool
    create_time_ms: int
    update_time_ms: int
    chat_type: str = "group"
    root_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    uuid: str | None = None
    in_thread: bool = False
    updated: bool = False
    history: tuple[str, ...] = ()
    at: float = 0.0
    app_id: str | None = None
    sender_open_id: str | None = None
    """A user's message: who sent it (None: the app's bot)."""
    mentions: tuple[dict[str, Any], ...] = ()
    upper_message_id: str | None = None
    """A message inside a merge_forward: that merge_forward's id."""
    card_id: str | None = None
    """A bot message showing a card entity."""


@dataclass(frozen=True)
class SentFrame:
    """One delivered frame: its payload, when it was written to a connection, the event it
    belongs to, the app it went to and, for card callbacks, the clicked message."""

    payload: bytes
    sent_at: float
    message_id: str | None
    event_key: str
    app_id: str | None = None
    card_message_id: str | None = None


def _parse_content(content: str) -> dict[str, Any]:
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return {"raw": content}
    return value if isinstance(value, dict) else {"value": value}


def to_sent_message(rec: MessageRecord, card: CardView | None = None) -> SentMessage:
    """The public, parsed view of a message (showing `card`, the entity it refers to)."""
    content = _parse_content(rec.content) if card is None else card.card
    text = flatten_text(rec.msg_type, content) if card is None else card.text
    return SentMessage(
        message_id=rec.message_id, chat_id=rec.chat_id, msg_type=rec.msg_type,
        content=content, text=text, reply_to=rec.parent_id,
        uuid=rec.uuid, in_thread=rec.in_thread, updated=rec.updated, root_id=rec.root_id,
        thread_id=rec.thread_id, history=tuple(_parse_content(c) for c in rec.history),
        at=rec.at, app_id=rec.app_id, card_id=rec.card_id,
        streaming=card is not None and card.streaming_mode,
        card_updates=0 if card is None else card.updates,
    )


def card_response(ack: Ack, limit_ms: float) -> CardResponse:
    """Judge an ACK of a card callback frame against Feishu's answer deadline."""
    data = ack.data
    toast = data.get("toast") if data is not None else None
    card = data.get("card") if data is not None else None
    return CardResponse(
        frame_id=ack.frame_message_id, code=ack.code, data=data,
        toast=toast if isinstance(toast, dict) else None,
        card=card if isinstance(card, dict) else None,
        latency_ms=ack.latency_ms, late=ack.latency_ms > limit_ms)


def raw_card(response: CardResponse) -> dict[str, Any] | None:
    """The card JSON an in-time, successful answer replaces the clicked message with:
    `{"card": {"type": "raw", "data": {...}}}`; None otherwise."""
    card = response.card
    if response.late or response.code != 200 or card is None or card.get("type") != "raw":
        return None
    data = card.get("data")
    return data if isinstance(data, dict) else None

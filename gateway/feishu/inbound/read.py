"""One reader of a message event: `read(payload, rules, bot_open_id)` judges it (admission)
and parses it once, and gives the message to take, or why it is not taken. Pure: no I/O,
no logging (the listener's intake says what happened).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import MalformedEvent
from gateway.core.model import Message
from gateway.core.rules import Rules
from gateway.feishu.inbound.admission import Arrival, admit, arrival_of
from gateway.feishu.inbound.events import parse_message

UNJUDGED = "identity-unknown"
"""A refusal's code while the bot's identity is unknown: judged later, not refused."""
MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a message event is not taken."""

    code: str
    """Admission's code (a policy, an @mention missing, the bot's own...), UNJUDGED or
    MALFORMED."""
    reason: str
    arrival: Arrival
    tell: bool = False
    """The person is told (a refused direct message)."""
    message: Message | None = None
    """The message, when the person is told (what the notice replies to)."""


def read(payload: Mapping[str, Any], rules: Rules, bot_open_id: str, *,
         max_text_chars: int = 16_000) -> Message | Refusal:
    """An `im.message.receive_v1` payload: the message to take, or why not."""
    arrival = arrival_of(payload)
    verdict = admit(arrival, rules, bot_open_id)
    if verdict.code == UNJUDGED:
        return Refusal(UNJUDGED, verdict.reason, arrival)
    if not verdict.admitted:  # (parsed only when the person is told: chatter costs nothing)
        told = _parsed(payload, bot_open_id, max_text_chars) if verdict.tell else None
        return Refusal(verdict.code or "other", verdict.reason, arrival, told is not None, told)
    try:
        return parse_message(payload, bot_open_id=bot_open_id, max_text_chars=max_text_chars)
    except MalformedEvent as error:
        return Refusal(MALFORMED, str(error), arrival)


def _parsed(payload: Mapping[str, Any], bot_open_id: str,
            max_text_chars: int) -> Message | None:
    try:
        return parse_message(payload, bot_open_id=bot_open_id, max_text_chars=max_text_chars)
    except MalformedEvent:
        return None

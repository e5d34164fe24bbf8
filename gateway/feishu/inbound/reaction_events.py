"""Reaction events (`im.message.reaction.created_v1` / `deleted_v1`) → `ReactionEvent`
values. Pure: no I/O, no logging. Feishu's event names the message and who reacted, not the
chat: the listener's desk reads the message to learn whose answer it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import MalformedEvent
from gateway.feishu.inbound.fields import mapping, text_field, usable_id

ADDED = "im.message.reaction.created_v1"
REMOVED = "im.message.reaction.deleted_v1"
REACTION_EVENTS = frozenset({ADDED, REMOVED})

EMOJI_LABELS = frozenset({
    "THUMBSUP", "ThumbsDown", "THUMBSDOWN", "OK", "DONE", "HEART", "SMILE", "LAUGH", "JIAYI",
    "APPLAUSE", "FINGERHEART", "MUSCLE", "CLAP", "PRAISE", "THANKS", "LOVE", "WOW", "CRY",
    "SOB", "ANGRY", "FACEPALM", "SHOCKED", "THINKING", "CheckMark", "CrossMark", "Get",
    "Typing", "OnIt", "LGTM", "PARTY", "FIRE", "ROSE", "BEER", "CAKE", "GIFT", "EYES",
})
"""The emoji types counted by name in the reactions metric; any other is `other`, so the
metric's series stay bounded whatever types Feishu adds or a forged event names."""


@dataclass(frozen=True, slots=True)
class ReactionEvent:
    event_id: str
    message_id: str
    emoji: str
    added: bool
    by_user: bool
    """A person reacted (operator_type "user"), not an app (this bot's own typing mark)."""
    by: str
    """The person's open_id ('' for an app)."""
    at_ms: int


def emoji_label(emoji: str) -> str:
    """The metric label of an emoji type (bounded: see EMOJI_LABELS)."""
    return emoji if emoji in EMOJI_LABELS else "other"


def parse_reaction(event_type: str, payload: Mapping[str, Any]) -> ReactionEvent:
    """A reaction event (schema 2.0); MalformedEvent when it names no message or emoji."""
    event = mapping(payload.get("event"))
    message_id = event.get("message_id")
    if not usable_id(message_id):
        raise MalformedEvent(f"reaction event without a usable message_id ({message_id!r:.40})")
    emoji = mapping(event.get("reaction_type")).get("emoji_type")
    if not usable_id(emoji) or len(str(emoji)) > 64:
        raise MalformedEvent(f"reaction event without a usable emoji_type ({emoji!r:.40})")
    try:
        at_ms = int(event.get("action_time") or 0)
    except (TypeError, ValueError, OverflowError):
        at_ms = 0
    by_user = event.get("operator_type", "user") == "user"
    header = mapping(payload.get("header"))
    return ReactionEvent(text_field(header.get("event_id")), str(message_id), str(emoji),
                         event_type == ADDED, by_user,
                         text_field(mapping(event.get("user_id")).get("open_id"))
                         if by_user else "", max(at_ms, 0))

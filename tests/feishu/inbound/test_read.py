"""One reader of a message event (pure): the message to take, or why not; a refused
direct message carries its parsed message (what the notice replies to), group chatter that
did not address the bot is not parsed at all."""

from __future__ import annotations

import json
from typing import Any

from gateway.core.model import Message
from gateway.core.rules import Rules
from gateway.feishu.inbound.read import MALFORMED, UNJUDGED, Refusal, read


def event(text: str | None, *, chat_type: str = "p2p", sender: str = "ou_a",
          mentions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    content = "{" if text is None else json.dumps({"text": text})
    return {"event": {"sender": {"sender_id": {"open_id": sender}, "sender_type": "user"},
                      "message": {"message_id": "om_1", "chat_id": "oc_1",
                                  "chat_type": chat_type, "message_type": "text",
                                  "content": content, "mentions": mentions or []}}}


def test_an_admitted_message_is_read_once() -> None:
    read_as = read(event("hello"), Rules(require_mention=False), "ou_bot")
    assert isinstance(read_as, Message) and read_as.text == "hello"


def test_a_refused_direct_message_carries_what_the_notice_replies_to() -> None:
    refusal = read(event("hi"), Rules(dm_policy="allowlist"), "ou_bot")
    assert isinstance(refusal, Refusal) and refusal.tell
    assert refusal.message is not None and refusal.message.message_id == "om_1"
    unreadable = read(event(None), Rules(dm_policy="allowlist"), "ou_bot")
    assert isinstance(unreadable, Refusal) and not unreadable.tell and unreadable.message is None


def test_chatter_without_a_mention_is_refused_unread_and_a_mention_waits_for_the_bot() -> None:
    chatter = read(event(None, chat_type="group"), Rules(require_mention=True), "ou_bot")
    assert isinstance(chatter, Refusal) and chatter.code != MALFORMED and chatter.message is None
    mention = [{"key": "@_user_1", "id": {"open_id": "ou_x"}, "name": "x"}]
    waits = read(event("@_user_1 hi", chat_type="group", mentions=mention),
                 Rules(require_mention=True), "")
    assert isinstance(waits, Refusal) and waits.code == UNJUDGED


def test_an_admitted_message_that_cannot_be_read_is_malformed() -> None:
    broken = read(event(None), Rules(require_mention=False), "ou_bot")
    assert isinstance(broken, Refusal) and broken.code == MALFORMED

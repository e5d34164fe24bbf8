"""Messages read back from the list API become the payload a push would have carried, so
admission and parsing treat them exactly as pushed ones (pure)."""

from __future__ import annotations

import json
from typing import Any

from gateway.core.rules import Rules
from gateway.feishu.inbound.admission import admit, arrival_of
from gateway.feishu.inbound.events import parse_message
from gateway.feishu.inbound.listed import event_of, page_of, query_window, skipped

BOT = "ou_bot"


def item(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "message_id": "om_1", "msg_type": "text", "create_time": "1700000000123",
        "chat_id": "oc_g", "deleted": False,
        "sender": {"id": "ou_ann", "id_type": "open_id", "sender_type": "user"},
        "body": {"content": json.dumps({"text": "@_user_1 hello there"})},
        "mentions": [{"key": "@_user_1", "id": BOT, "id_type": "open_id", "name": "Bot"}],
        "parent_id": "om_0", "root_id": "om_0", "thread_id": "omt_1"}
    return {**base, **over}


def test_a_listed_group_message_is_admitted_and_parsed_as_a_pushed_one() -> None:
    payload = event_of(item(), "group")
    rules = Rules(require_mention=True)
    assert admit(arrival_of(payload), rules, BOT).admitted
    message = parse_message(payload, bot_open_id=BOT)
    assert (message.message_id, message.chat_id, message.chat_type) == ("om_1", "oc_g", "group")
    assert (message.text, message.sender_open_id) == ("hello there", "ou_ann")
    assert message.create_time_ms == 1_700_000_000_123
    assert (message.parent_id, message.root_id, message.thread_id) == ("om_0", "om_0", "omt_1")
    assert message.mentioned_open_ids == (BOT,)


def test_mention_gating_holds_for_listed_messages() -> None:
    other = [{"key": "@_user_1", "id": "ou_bob", "id_type": "open_id", "name": "Bob"}]
    payload = event_of(item(mentions=other, body={"content": '{"text":"@_user_1 hi"}'}),
                       "group")
    verdict = admit(arrival_of(payload), Rules(require_mention=True), BOT)
    assert not verdict.admitted and verdict.code == "no-mention"
    assert parse_message(payload, bot_open_id=BOT).text == "@Bob hi"
    assert admit(arrival_of(event_of(item(mentions=[]), "p2p")), Rules(), BOT).admitted


def test_apps_deleted_messages_and_forwarded_children_are_skipped() -> None:
    assert skipped(item()) == ""
    assert skipped(item(sender={"id": "cli_x", "id_type": "app_id", "sender_type": "app"}))
    assert skipped(item(sender=None))
    assert skipped(item(deleted=True)) == "deleted"
    assert skipped(item(upper_message_id="om_fw")) == "inside a forward"


def test_an_odd_item_still_becomes_a_payload_that_parsing_judges() -> None:
    payload = event_of({"message_id": "om_x", "chat_id": "oc_x", "msg_type": "sticker",
                        "create_time": "soon", "mentions": "no", "sender": [],
                        "body": {"content": '{"file_key":"f"}'}}, "p2p")
    message = parse_message(payload)
    assert message.create_time_ms == 0 and message.text.startswith("[sticker")
    assert message.mentioned_open_ids == ()


def test_the_window_in_seconds_covers_every_millisecond_of_it() -> None:
    assert query_window(1_700_000_000_999, 1_700_000_060_001) == (1_700_000_000, 1_700_000_061)
    assert query_window(5000, 6000) == (5, 6)


def test_a_page_is_read_leniently() -> None:
    page = page_of({"code": 0, "data": {"items": [item(), "junk"], "has_more": True,
                                        "page_token": "t1"}})
    assert (len(page.items), page.has_more, page.token) == (1, True, "t1")
    empty = page_of({"code": 0})
    assert (empty.items, empty.has_more, empty.token) == ((), False, "")

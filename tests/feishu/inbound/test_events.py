"""Normalising Feishu payloads: pure, so tested without any server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.errors import MalformedEvent
from gateway.core.model import Attachment, Message, Turn
from gateway.feishu.inbound.admission import arrival_of
from gateway.feishu.inbound.events import TRUNCATION_MARK, parse_message


def payload(content: Any, message_type: str = "text", **message: Any) -> dict[str, Any]:
    body = {
        "message_id": "om_1", "chat_id": "oc_1", "chat_type": "group",
        "message_type": message_type, "create_time": "1700000000000",
        "content": content if isinstance(content, str) else json.dumps(content),
        **message,
    }
    return {"schema": "2.0", "header": {"event_id": "ev_1", "event_type": "im.message.receive_v1"},
            "event": {"sender": {"sender_id": {"open_id": "ou_u"}, "sender_type": "user"},
                      "message": body}}


def test_text_message_becomes_a_frozen_json_round_trippable_message() -> None:
    message = parse_message(payload({"text": "hello"}))
    assert (message.message_id, message.chat_id, message.text) == ("om_1", "oc_1", "hello")
    assert message.sender_open_id == "ou_u" and message.create_time_ms == 1700000000000
    assert type(message).from_json(message.to_json()) == message


def test_bot_mention_is_stripped_and_other_mentions_named() -> None:
    mentions = [{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Bot"},
                {"key": "@_user_2", "id": {"open_id": "ou_ann"}, "name": "Ann"}]
    message = parse_message(payload({"text": "@_user_1 ask @_user_2 now"}, mentions=mentions),
                            bot_open_id="ou_bot")
    assert message.text == "ask @Ann now"
    assert message.mentioned_open_ids == ("ou_bot", "ou_ann")


def test_post_is_flattened_including_locale_wrapping() -> None:
    post = {"zh_cn": {"title": "T", "content": [[{"tag": "text", "text": "a "},
                                                 {"tag": "a", "text": "link", "href": "x"}]]}}
    assert parse_message(payload(post, "post")).text == "T\na link (x)"


POST = {"zh_cn": {"title": "Deploy", "content": [
    [{"tag": "text", "text": "see "}, {"tag": "a", "text": "the doc", "href": "https://d/x"},
     {"tag": "text", "text": " by "}, {"tag": "at", "user_id": "ou_ann", "user_name": "Ann"},
     {"tag": "emotion", "emoji_type": "SMILE"}],
    [{"tag": "code_block", "language": "PYTHON", "text": "def f():\n    return 1\n"}],
    [{"tag": "img", "image_key": "img_v2_1"}, {"tag": "text", "text": "  indented"}]]}}


@pytest.mark.parametrize("message_type, content, text", [
    ("post", POST, "Deploy\nsee the doc (https://d/x) by @Ann:SMILE:\n```python\n"
                   "def f():\n    return 1\n```\n[image]  indented"),
    ("image", {"image_key": "img_v2_abc"}, "[image]"),
    ("file", {"file_key": "file_v2_x", "file_name": "report.pdf"},
     "[file report.pdf]"),
    ("audio", {"file_key": "file_v2_a", "duration": 3200}, "[audio 3s]"),
    ("media", {"file_key": "file_v2_m", "image_key": "img_t", "file_name": "clip.mp4",
               "duration": 12000}, "[video clip.mp4 12s]"),
    ("sticker", {"file_key": "stk"}, "[sticker]"),
    ("merge_forward", "Merged and Forwarded Message", "[forwarded messages]"),
    ("interactive", {"title": "Weekly report", "elements": []}, "[card: Weekly report]"),
    ("interactive", {"elements": []}, "[card]"),
    ("share_chat", {"chat_id": "oc_shared"}, "[shared chat oc_shared]"),
    ("share_user", {"user_id": "ou_shared"}, "[shared contact ou_shared]"),
    ("location", {"name": "Office", "longitude": "116.4", "latitude": "39.9"},
     "[location Office (39.9, 116.4)]"),
    ("todo", {"task_id": "t1", "summary": {"title": "", "content": [[
        {"tag": "text", "text": "ship it"}]]}}, "[todo: ship it]"),
    ("system", {"template": "{from_user} invited {to_chatters}"}, "[system message]"),
    ("hongbao", {"x": 1}, "[hongbao message]"),
])
def test_every_message_type_reads_well(message_type: str, content: Any, text: str) -> None:
    assert parse_message(payload(content, message_type)).text == text


@pytest.mark.parametrize("message_type, content, attachments", [
    ("post", POST, (Attachment("image", "img_v2_1"),)),
    ("post", {"content": [[{"tag": "img", "image_key": "img_a"}, {"tag": "text", "text": "x"},
                           {"tag": "media", "file_key": "file_m", "image_key": "img_c"},
                           {"tag": "img", "image_key": ""}]]},
     (Attachment("image", "img_a"), Attachment("video", "file_m"))),
    ("image", {"image_key": "img_v2_abc"}, (Attachment("image", "img_v2_abc"),)),
    ("file", {"file_key": "file_v2_x", "file_name": "report.pdf"},
     (Attachment("file", "file_v2_x", name="report.pdf"),)),
    ("audio", {"file_key": "file_v2_a", "duration": 3200},
     (Attachment("audio", "file_v2_a", duration_ms=3200),)),
    ("media", {"file_key": "file_v2_m", "image_key": "img_t", "file_name": "clip.mp4",
               "duration": 12000},
     (Attachment("video", "file_v2_m", name="clip.mp4", duration_ms=12000),)),
    ("file", {"file_name": "no key.pdf"}, ()),
    ("sticker", {"file_key": "stk"}, ()),
    ("text", {"text": "[image img_fake]"}, ()),
])
def test_every_attachment_reaches_the_agent_as_data(message_type: str, content: Any,
                                                    attachments: tuple[Attachment, ...]) -> None:
    """The agent gets each attachment as data (a post's inline ones too), never a key it
    would have to parse out of the text; the stored message keeps them."""
    message = parse_message(payload(content, message_type))
    assert message.attachments == attachments
    assert Message.from_json(message.to_json()) == message
    turn = Turn(message, 1)
    assert [a.message_id for a in turn.attachments] == [message.message_id] * len(attachments)


@pytest.mark.parametrize("bad, reason", [
    (payload("{not json"), "not JSON"),
    (payload({"text": "   "}), "empty text"),
    (payload({"nope": 1}), "without a text field"),
    ({"event": {"sender": {}, "message": {"message_type": "text"}}}, "content"),
    ({"event": "garbage"}, "object"),
])
def test_bad_events_raise_one_clear_reason(bad: dict[str, Any], reason: str) -> None:
    with pytest.raises(MalformedEvent, match=reason):
        parse_message(bad)


def test_oversized_text_is_truncated_with_a_mark() -> None:
    message = parse_message(payload({"text": "x" * 100_000}), max_text_chars=1000)
    assert len(message.text) == 1000 + len(TRUNCATION_MARK)
    assert message.text.endswith(TRUNCATION_MARK)


def test_what_admission_looks_at_is_read_leniently() -> None:
    event = payload({"text": "@_user_1 @_all hi"}, mentions=[
        {"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Bot"},
        {"key": "@_all", "id": {}, "name": "everyone"}, "junk"])
    arrival = arrival_of(event)
    assert (arrival.chat_id, arrival.chat_type, arrival.sender_open_id) == ("oc_1", "group",
                                                                             "ou_u")
    assert arrival.sender_type == "user" and arrival.mentioned_open_ids == ("ou_bot",)
    assert arrival.mentions_all
    event["event"]["sender"]["sender_type"] = "app"
    assert arrival_of(event).sender_type == "app"
    broken = arrival_of({"event": {"message": "not an object", "sender": 3}})
    assert (broken.chat_id, broken.sender_open_id, broken.mentions_all) == ("", "", False)


def test_a_mention_of_the_bot_keeps_the_layout_of_what_follows() -> None:
    """A group message that @mentions the bot used to lose every newline and indent."""
    mentions = [{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Bot"},
                {"key": "@_user_2", "id": {"open_id": "ou_ann"}, "name": "Ann"}]
    text = "@_user_1 fix this:\n```python\ndef f():\n    return  1\n```\n\ncc @_user_2 thanks"
    message = parse_message(payload({"text": text}, mentions=mentions), bot_open_id="ou_bot")
    assert message.text == ("fix this:\n```python\ndef f():\n    return  1\n```\n\n"
                            "cc @Ann thanks")
    middle = parse_message(payload({"text": "please @_user_1 look"}, mentions=mentions[:1]),
                           bot_open_id="ou_bot")
    assert middle.text == "please look"

"""Reading messages back from the simulator (get message, merge_forward children, resource
downloads), refused rich forms, post validation and replies to messages that are gone;
over real HTTP, and the reference SDK where it parses what the simulator answers."""

from __future__ import annotations

import json
from typing import Any

import lark_oapi as lark
from lark_oapi.api.im.v1 import GetMessageResourceRequest

from gateway.simulator import Simulator
from tests.support.openapi import MESSAGES, Api
from tests.support.simulator_fixtures import Inbox, SdkClientFactory, message_handler
from tests.support.simulator_fixtures import sdk_ws_client as sdk_ws_client_fixture  # noqa: F401

MD_POST = {"zh_cn": {"content": [[{"tag": "md", "text": "**bold**"}]]}}


def items(api: Api, message_id: str) -> list[dict[str, Any]]:
    body = api.call("GET", f"{MESSAGES}/{message_id}").json()
    assert body["code"] == 0, body
    return list(body["data"]["items"])


def test_a_reply_event_carries_parent_and_root_and_reads_back(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox: Inbox[Any] = Inbox()
    sdk_ws_client(message_handler(inbox.add))
    simulator.wait_connected(1)
    first = simulator.send_text("oc_q", "first", chat_type="group", deliver=False)
    second = simulator.send_text("oc_q", "second", chat_type="group", parent_id=first,
                                 mentions=[simulator.mention_bot()])
    third = simulator.send_text("oc_q", "third", chat_type="group", parent_id=second)
    events = [e.event.message for e in inbox.wait_for(2)]
    assert [(m.message_id, m.parent_id, m.root_id) for m in events] == [
        (second, first, first), (third, second, first)]
    with Api(simulator) as api:
        [item] = items(api, second)
    assert (item["parent_id"], item["root_id"], item["msg_type"]) == (first, first, "text")
    assert item["sender"]["id"] == "ou_user_1" and item["sender"]["sender_type"] == "user"
    assert json.loads(item["body"]["content"])["text"].endswith("second")
    assert item["mentions"][0]["id"] == simulator.bot_open_id


def test_a_merge_forward_lists_its_children_and_gone_messages_answer_codes(
        simulator: Simulator) -> None:
    forward = simulator.send_merge_forward("oc_fw", [
        ("text", {"text": "hello"}, "ou_ann"),
        ("merge_forward", [("text", {"text": "deep"}, "ou_bob")], "ou_ann"),
        ("post", MD_POST, simulator.app_id),
    ], deliver=False)
    reply_to = simulator.send_text("oc_fw", "recalled soon", deliver=False)
    simulator.withdraw(reply_to)
    with Api(simulator) as api:
        listed = items(api, forward)
        assert api.code("GET", f"{MESSAGES}/{reply_to}") == 230011
        assert api.code("GET", f"{MESSAGES}/om_never") == 231003
        assert api.reply(reply_to, "text", {"text": "x"}).json()["code"] == 230011
        assert api.reply("om_never", "text", {"text": "x"}).json()["code"] == 231003
    assert [i["msg_type"] for i in listed] == [
        "merge_forward", "text", "merge_forward", "text", "post"]
    root, hello, inner, deep, post = listed
    assert root["message_id"] == forward and "upper_message_id" not in root
    assert root["body"]["content"] == "Merged and Forwarded Message"
    assert [hello["upper_message_id"], inner["upper_message_id"], post["upper_message_id"]] \
        == [forward] * 3
    assert deep["upper_message_id"] == inner["message_id"]
    assert (hello["sender"]["id"], post["sender"]["sender_type"]) == ("ou_ann", "app")


def test_resources_download_with_their_type_and_name(simulator: Simulator) -> None:
    mid, key = simulator.send_attachment("oc_att", b"%PDF-1.7 tiny", name="報告.pdf",
                                         deliver=False)
    image_mid, image_key = simulator.send_attachment(
        "oc_att", b"\x89PNG....", message_type="image", deliver=False)
    path = f"{MESSAGES}/{mid}/resources/{key}"
    with Api(simulator) as api:
        got = api.call("GET", path, params={"type": "file"})
        assert (got.status_code, got.content) == (200, b"%PDF-1.7 tiny")
        assert got.headers["content-type"] == "application/pdf"
        assert got.headers["content-disposition"].startswith("attachment; filename=")
        image = api.call("GET", f"{MESSAGES}/{image_mid}/resources/{image_key}",
                         params={"type": "image"})
        assert (image.content, image.headers["content-type"]) == (b"\x89PNG....", "image/png")
        assert api.code("GET", path, params={"type": "image"}) == 234001
        assert api.code("GET", path, params={}) == 234001
        assert api.code("GET", f"{MESSAGES}/{image_mid}/resources/{key}",
                        params={"type": "file"}) == 234003
        simulator.withdraw(image_mid)
        assert api.code("GET", f"{MESSAGES}/{image_mid}/resources/{image_key}",
                        params={"type": "image"}) == 230110
    client = (lark.Client.builder().app_id(simulator.app_id).app_secret(simulator.app_secret)
              .domain(simulator.url).log_level(lark.LogLevel.WARNING).build())
    sdk = client.im.v1.message_resource.get(GetMessageResourceRequest.builder()
                                            .message_id(mid).file_key(key).type("file").build())
    assert sdk.success(), (sdk.code, sdk.msg)
    assert (sdk.file_name, sdk.file.read()) == ("報告.pdf", b"%PDF-1.7 tiny")


def test_rich_forms_can_be_refused_and_posts_are_validated(simulator: Simulator) -> None:
    question = simulator.send_text("oc_rich", "q", deliver=False)
    with Api(simulator) as api:
        assert api.reply(question, "post", MD_POST).json()["code"] == 0
        simulator.reject_msg_types({"post", "interactive"})
        refused = api.reply(question, "post", MD_POST)
        assert (refused.status_code, refused.json()["code"]) == (400, 230001)
        assert api.send("oc_rich", "interactive", {"schema": "2.0", "body": {
            "elements": []}}).json()["code"] == 230001
        assert api.reply(question, "text", {"text": "plain"}).json()["code"] == 0
        simulator.reject_msg_types(None)
        assert api.reply(question, "post", MD_POST).json()["code"] == 0
        bad_posts: list[dict[str, Any]] = [
            {}, {"post": MD_POST}, {"zh_cn": {"title": "t"}},
            {"zh_cn": {"content": [[{"tag": "blink", "text": "x"}]]}},
            {"zh_cn": {"content": [[{"tag": "a", "text": "no href"}]]}},
            {"zh_cn": {"content": [[{"tag": "md", "text": "a"}, {"tag": "text", "text": "b"}]]}},
            {"zh_cn": {"content": [{"tag": "text", "text": "not a paragraph"}]}},
            {"en_us": {"title": "", "content": []}},
        ]
        codes = [api.reply(question, "post", post).json()["code"] for post in bad_posts]
        assert codes == [230001] * len(bad_posts)
        assert api.reply(question, "post", {"en_us": {"title": "T", "content": [[
            {"tag": "text", "text": "a "}, {"tag": "at", "user_id": "all"}], [{"tag": "hr"}]]
        }}).json()["code"] == 0
    assert simulator.rejected_sends == {"post": 1, "interactive": 1}
    assert [m.msg_type for m in simulator.sent_messages("oc_rich")] == [
        "post", "text", "post", "post"]

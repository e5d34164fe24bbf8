"""The simulator against the real, unmodified lark-oapi SDK (ws.Client and open APIs)."""

from __future__ import annotations

import json
from typing import Any

import lark_oapi as lark
import pytest
import requests
from lark_oapi.api.im.v1 import (
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
    UpdateMessageRequest,
    UpdateMessageRequestBody,
)
from lark_oapi.event.callback.model.p2_card_action_trigger import (
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)
from websockets.sync.client import connect as ws_connect

from gateway.simulator import Simulator
from gateway.simulator.frames import build_data_frames, parse_frame, split_payload
from tests.simulator_fixtures import Inbox, SdkClientFactory, message_handler
from tests.simulator_fixtures import sdk_ws_client as sdk_ws_client_fixture  # noqa: F401
from tests.simulator_fixtures import simulator as simulator_fixture  # noqa: F401


def api_client(sim: Simulator) -> lark.Client:
    return (lark.Client.builder().app_id(sim.app_id).app_secret(sim.app_secret)
            .domain(sim.url).log_level(lark.LogLevel.WARNING).build())


def reply(client: lark.Client, message_id: str, text: str, uuid: str | None = None) -> Any:
    body = ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": text}))
    if uuid is not None:
        body = body.uuid(uuid)
    request = ReplyMessageRequest.builder().message_id(message_id).request_body(body.build())
    return client.im.v1.message.reply(request.build())


def raw_bytes(message: str | bytes) -> bytes:
    assert isinstance(message, bytes), "the simulator sends binary frames only"
    return message


def connected_inbox(sim: Simulator, sdk_ws_client: SdkClientFactory) -> Inbox[Any]:
    inbox: Inbox[Any] = Inbox()
    sdk_ws_client(message_handler(inbox.add))
    sim.wait_connected(1)
    return inbox


def test_multipart_text_reaches_handler_and_is_acked(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox = connected_inbox(simulator, sdk_ws_client)
    text = "hello 世界, split into three frames " * 4
    mid = simulator.send_text("oc_chat_1", text, chat_type="group",
                              mentions=[simulator.mention_bot()], parts=3)
    event = inbox.wait_for(1)[0].event
    assert event.message.message_id == mid
    assert event.message.chat_id == "oc_chat_1"
    assert json.loads(event.message.content)["text"] == f"@_user_1 {text}"
    assert event.message.mentions[0].id.open_id == simulator.bot_open_id
    ack = simulator.wait_for_acks(1)[0]
    assert (ack.code, ack.message_id, ack.data) == (200, mid, None)
    assert ack.latency_ms >= 0


def test_reply_with_uuid_is_recorded_once(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox = connected_inbox(simulator, sdk_ws_client)
    mid = simulator.send_text("oc_chat_2", "question")
    inbox.wait_for(1)
    client = api_client(simulator)
    first = reply(client, mid, "answer", uuid="turn-1")
    assert first.success(), (first.code, first.msg)
    second = reply(client, mid, "answer again", uuid="turn-1")
    assert second.success() and second.data.message_id == first.data.message_id
    sent = simulator.wait_for_messages(1, chat_id="oc_chat_2")
    assert len(simulator.sent_messages()) == 1
    assert (sent[0].reply_to, sent[0].chat_id, sent[0].text) == (mid, "oc_chat_2", "answer")
    assert (sent[0].uuid, first.data.parent_id, first.data.chat_id) == ("turn-1", mid, "oc_chat_2")
    unknown = reply(client, "om_nope", "x")
    assert unknown.code == 230011


def test_create_message_reactions_and_bot_info(simulator: Simulator) -> None:
    client = api_client(simulator)
    body = (CreateMessageRequestBody.builder().receive_id("oc_chat_3").msg_type("text")
            .content(json.dumps({"text": "proactive"})).build())
    created = client.im.v1.message.create(
        CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build())
    assert created.success(), (created.code, created.msg)
    mid = created.data.message_id
    assert [m.text for m in simulator.sent_messages("oc_chat_3")] == ["proactive"]

    reaction_body = (CreateMessageReactionRequestBody.builder()
                     .reaction_type(Emoji.builder().emoji_type("Typing").build()).build())
    added = client.im.v1.message_reaction.create(
        CreateMessageReactionRequest.builder().message_id(mid).request_body(reaction_body)
        .build())
    assert added.success() and simulator.reactions(mid) == ["Typing"]
    deleted = client.im.v1.message_reaction.delete(
        DeleteMessageReactionRequest.builder().message_id(mid)
        .reaction_id(added.data.reaction_id).build())
    assert deleted.success() and simulator.reactions(mid) == []

    info = client.request(
        lark.BaseRequest.builder().http_method(lark.HttpMethod.GET).uri("/open-apis/bot/v3/info")
        .token_types({lark.AccessTokenType.TENANT}).build())
    assert info.code == 0
    assert json.loads(info.raw.content)["bot"]["open_id"] == simulator.bot_open_id
    assert simulator.requests_count("/open-apis/im/v1/messages") == 3


def test_client_reconnects_after_dropped_connection(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox = connected_inbox(simulator, sdk_ws_client)
    endpoint_calls = simulator.requests_count("/callback/ws/endpoint")
    assert simulator.drop_connections() == 1
    simulator.wait_connected(1)
    assert simulator.requests_count("/callback/ws/endpoint") == endpoint_calls + 1
    mid = simulator.send_text("oc_chat_4", "after reconnect")
    assert inbox.wait_for(1)[0].event.message.message_id == mid


def test_redelivery_repeats_the_same_event(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox = connected_inbox(simulator, sdk_ws_client)
    mid = simulator.send_text("oc_chat_5", "once")
    first_frame = simulator.wait_for_acks(1)[0].frame_message_id
    second_frame = simulator.redeliver(mid)
    events = inbox.wait_for(2)
    assert [e.event.message.message_id for e in events] == [mid, mid]
    assert events[0].header.event_id == events[1].header.event_id
    assert second_frame != first_frame
    assert simulator.wait_for_ack(second_frame).code == 200


def test_bad_credentials_and_invalid_token_are_rejected(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    bad = requests.post(simulator.url + "/callback/ws/endpoint",
                        json={"AppID": simulator.app_id, "AppSecret": "wrong"}, timeout=5)
    assert bad.status_code == 200 and bad.json()["code"] not in (0, 1, 1000040343)
    token = requests.post(simulator.url + "/open-apis/auth/v3/tenant_access_token/internal",
                          json={"app_id": simulator.app_id, "app_secret": "wrong"}, timeout=5)
    assert token.json()["code"] != 0
    info = requests.get(simulator.url + "/open-apis/bot/v3/info",
                        headers={"Authorization": "Bearer t-forged"}, timeout=5)
    assert (info.status_code, info.json()["code"]) == (400, 99991663)
    garbage = requests.post(simulator.url + "/open-apis/auth/v3/tenant_access_token/internal",
                            data=b"{not json", timeout=5)
    assert garbage.status_code == 400 and garbage.json()["code"] != 0

    client = sdk_ws_client(message_handler(lambda _: None), app_secret="wrong")
    client.wait_finished()
    assert isinstance(client.error, lark.ws.exception.ClientException)
    assert simulator.connection_count == 0


def test_card_action_response_travels_back_in_the_ack(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    seen: Inbox[P2CardActionTrigger] = Inbox()

    def on_card(data: P2CardActionTrigger) -> P2CardActionTriggerResponse:
        seen.add(data)
        return P2CardActionTriggerResponse({"toast": {"type": "success", "content": "done"}})

    handler = (lark.EventDispatcherHandler.builder("", "")
               .register_p2_card_action_trigger(on_card).build())
    sdk_ws_client(handler)
    simulator.wait_connected(1)
    frame_id = simulator.send_card_action("oc_chat_7", "om_card_1", "ou_user_9",
                                          {"action": "approve"}, parts=2)
    event = seen.wait_for(1)[0].event
    assert (event.action.value, event.context.open_message_id) == ({"action": "approve"},
                                                                   "om_card_1")
    assert event.operator.open_id == "ou_user_9"
    ack = simulator.wait_for_ack(frame_id)
    assert ack.code == 200
    assert ack.data == {"toast": {"type": "success", "content": "done"}}


def test_update_and_patch_keep_history(simulator: Simulator) -> None:
    client = api_client(simulator)
    card = {"elements": [{"tag": "markdown", "content": "thinking"}]}
    body = (CreateMessageRequestBody.builder().receive_id("ou_user_1").msg_type("interactive")
            .content(json.dumps(card)).uuid("card-1").build())
    created = client.im.v1.message.create(
        CreateMessageRequest.builder().receive_id_type("open_id").request_body(body).build())
    assert created.success(), (created.code, created.msg)
    mid = created.data.message_id
    card["elements"][0]["content"] = "done"
    patched = client.im.v1.message.patch(
        PatchMessageRequest.builder().message_id(mid).request_body(
            PatchMessageRequestBody.builder().content(json.dumps(card)).build()).build())
    assert patched.success(), (patched.code, patched.msg)
    [sent] = simulator.sent_messages()
    assert (sent.text, sent.updated, sent.history[0]["elements"][0]["content"]) == (
        "done", True, "thinking")
    not_text = client.im.v1.message.update(
        UpdateMessageRequest.builder().message_id(mid).request_body(
            UpdateMessageRequestBody.builder().msg_type("text")
            .content(json.dumps({"text": "x"})).build()).build())
    assert not_text.success()  # PUT may turn a message into text or post
    assert simulator.sent_messages()[0].msg_type == "text"


def test_round_robin_and_refused_endpoint(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox = connected_inbox(simulator, sdk_ws_client)
    # lark.ws.Client keeps its loop in a module global: one per process. The second
    # client is a raw websocket speaking the same protocol.
    endpoint = requests.post(simulator.url + "/callback/ws/endpoint", timeout=5, json={
        "AppID": simulator.app_id, "AppSecret": simulator.app_secret}).json()["data"]
    with ws_connect(endpoint["URL"], proxy=None) as raw:
        simulator.wait_connected(2)
        for n in range(4):
            simulator.send_text("oc_chat_8", f"m{n}")
        raw_frames = [parse_frame(raw_bytes(raw.recv(timeout=10))) for _ in range(2)]
        assert len(inbox.wait_for(2)) == 2
        assert {f.headers["type"] for f in raw_frames} == {"event"}

    simulator.set_endpoint_available(False)
    simulator.wait_connected(1)
    calls = simulator.requests_count("/callback/ws/endpoint")
    simulator.drop_connections()
    simulator.wait_for_requests("/callback/ws/endpoint", calls + 2)  # refused, retried
    assert simulator.connection_count == 0
    simulator.set_endpoint_available(True)
    simulator.wait_connected(1)


def test_malformed_event_gets_a_500_ack_and_the_client_survives(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox = connected_inbox(simulator, sdk_ws_client)
    broken = simulator.send_event(b'{"schema": "2.0", "header": ', parts=2)
    assert simulator.wait_for_ack(broken).code == 500
    mid = simulator.send_text("oc_chat_9", "still alive")
    assert inbox.wait_for(1)[0].event.message.message_id == mid


def test_frames_split_and_round_trip() -> None:
    payload = "事件".encode() * 5
    chunks = split_payload(payload, 4)
    assert b"".join(chunks) == payload and all(chunks) and len(chunks) == 4
    encoded = build_data_frames(payload, frame_message_id="f1", trace_id="t1", service=7,
                                seq_id=1, log_id=2, parts=2)
    parsed = [parse_frame(x) for x in encoded]
    assert [(f.headers["sum"], f.headers["seq"], f.service) for f in parsed] == [
        ("2", "0", 7), ("2", "1", 7)]
    assert b"".join(f.payload for f in parsed) == payload
    with pytest.raises(ValueError):
        split_payload(b"ab", 3)
    with pytest.raises(ValueError):
        parse_frame(b"\xff\xff not a frame")

"""The simulator against the real, unmodified lark-oapi SDK (ws.Client and open APIs)."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
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
    UpdateMessageRequest,
    UpdateMessageRequestBody,
)
from lark_oapi.event.callback.model.p2_card_action_trigger import (
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)
from websockets.sync.client import connect as ws_connect

from gateway.feishu.ws.frames import (
    METHOD_DATA,
    build_data_frames,
    encode_frame,
    parse_frame,
    split_payload,
)
from gateway.simulator import SendFaults, Simulator
from tests.support.openapi import api_client, reply
from tests.support.simulator_fixtures import Inbox, SdkClientFactory, SdkWsClient, message_handler
from tests.support.simulator_fixtures import sdk_ws_client as sdk_ws_client_fixture  # noqa: F401
from tests.support.simulator_fixtures import simulator as simulator_fixture  # noqa: F401


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
    assert unknown.code == 231003  # never existed; a withdrawn message answers 230011


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
    card_edit = client.im.v1.message.update(
        UpdateMessageRequest.builder().message_id(mid).request_body(
            UpdateMessageRequestBody.builder().msg_type("text")
            .content(json.dumps({"text": "x"})).build()).build())
    assert card_edit.code == 230001, "PUT edits only text and post messages (cards: PATCH)"


def test_a_text_message_is_edited_at_most_twenty_times(simulator: Simulator) -> None:
    client = api_client(simulator)
    body = (CreateMessageRequestBody.builder().receive_id("ou_user_1").msg_type("text")
            .content(json.dumps({"text": "v0"})).uuid("text-1").build())
    created = client.im.v1.message.create(
        CreateMessageRequest.builder().receive_id_type("open_id").request_body(body).build())
    assert created.success(), (created.code, created.msg)

    def edit(n: int, msg_type: str = "text") -> int:
        content = {"text": f"v{n}"} if msg_type == "text" else {
            "zh_cn": {"content": [[{"tag": "md", "text": f"**v{n}**"}]]}}
        return int(client.im.v1.message.update(
            UpdateMessageRequest.builder().message_id(created.data.message_id).request_body(
                UpdateMessageRequestBody.builder().msg_type(msg_type)
                .content(json.dumps(content)).build()).build()).code)

    assert [edit(n, "post" if n == 20 else "text") for n in range(1, 21)] == [0] * 20
    assert edit(21) == 230001
    [sent] = simulator.sent_messages()
    assert (sent.msg_type, len(sent.history)) == ("post", 20)
    assert "v20" in sent.text


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


# --- fault injection on the open APIs (plain HTTP clients) -----------------------------

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
RATE_LIMITED = {"code": 99991400, "msg": "request trigger frequency limit"}


def http(sim: Simulator) -> httpx.Client:
    return httpx.Client(base_url=sim.url, trust_env=False, timeout=5)


def bearer(client: httpx.Client, sim: Simulator) -> dict[str, str]:
    body = client.post(TOKEN_PATH, json={"app_id": sim.app_id,
                                         "app_secret": sim.app_secret}).json()
    return {"Authorization": f"Bearer {body['tenant_access_token']}"}


def create(client: httpx.Client, auth: dict[str, str], uuid: str,
           chat_id: str = "oc_faults") -> httpx.Response:
    body = {"receive_id": chat_id, "msg_type": "text", "uuid": uuid,
            "content": json.dumps({"text": f"hello {uuid}"})}
    return client.post("/open-apis/im/v1/messages", params={"receive_id_type": "chat_id"},
                       json=body, headers=auth)


def test_scripted_send_faults_answer_like_feishu_and_its_proxies(simulator: Simulator) -> None:
    with http(simulator) as client:
        auth = bearer(client, simulator)
        simulator.script_send_faults(["5xx-json", "5xx-html:502", "429", "400-ratelimit",
                                      "5xx-html"])
        json_5xx = create(client, auth, "u-1")
        assert json_5xx.status_code in (500, 502, 503)
        assert json_5xx.json() == {"code": 1, "msg": "internal error"}
        html = create(client, auth, "u-1")
        assert (html.status_code, html.text) == (
            502, "<html><body><h1>502 Bad Gateway</h1></body></html>")
        assert html.headers["content-type"].startswith("text/html")
        for status in (429, 400):
            limited = create(client, auth, "u-1")
            assert (limited.status_code, limited.json()) == (status, RATE_LIMITED)
            assert limited.headers["x-ogw-ratelimit-limit"] == "50"
            assert limited.headers["x-ogw-ratelimit-reset"] == "1"
        assert create(client, auth, "u-1").status_code in (502, 504)
        assert simulator.sent_messages() == []  # every fault came before the create
        done = create(client, auth, "u-1")
        assert (done.status_code, done.json()["code"]) == (200, 0)
    assert [m.uuid for m in simulator.sent_messages()] == ["u-1"]
    assert simulator.send_attempts("u-1") == 6 and simulator.send_attempts("u-2") == 0
    assert simulator.fault_counts == {"5xx-json": 1, "5xx-html": 2, "429": 1,
                                      "400-ratelimit": 1}
    with pytest.raises(ValueError):
        simulator.script_send_faults(["teapot"])


def test_reset_after_create_creates_once_and_the_retry_returns_it(simulator: Simulator) -> None:
    parent = simulator.send_text("oc_reset", "question", deliver=False)
    body = {"msg_type": "text", "content": json.dumps({"text": "answer"}), "uuid": "r-1"}
    path = f"/open-apis/im/v1/messages/{parent}/reply"
    simulator.script_send_faults(["reset"])
    with http(simulator) as client:
        auth = bearer(client, simulator)
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            client.post(path, json=body, headers=auth)
        [created] = simulator.sent_messages()
        assert (created.uuid, created.reply_to, created.text) == ("r-1", parent, "answer")
        retry = client.post(path, json=body, headers=auth)
    assert retry.status_code == 200
    assert retry.json()["data"]["message_id"] == created.message_id
    assert len(simulator.sent_messages()) == 1
    assert simulator.send_attempts("r-1") == 2
    assert simulator.fault_counts == {"reset": 1}


def test_random_send_faults_are_seeded_and_can_be_turned_off(simulator: Simulator) -> None:
    with pytest.raises(ValueError):
        SendFaults(http_5xx_json=1.5)
    with pytest.raises(ValueError):
        SendFaults(rate_limit_429=0.6, rate_limit_400=0.6)
    faults = SendFaults(http_5xx_json=0.2, http_5xx_html=0.2, rate_limit_429=0.2,
                        rate_limit_400=0.1, seed=42)
    runs: list[list[int]] = []
    with http(simulator) as client:
        auth = bearer(client, simulator)
        for run in range(2):
            simulator.set_send_faults(faults)
            runs.append([create(client, auth, f"s-{run}-{n}").status_code for n in range(30)])
        simulator.set_send_faults(SendFaults(rate_limit_429=1.0))
        simulator.script_send_faults(["5xx-json:503"])  # the script goes first
        assert [create(client, auth, f"p-{n}").status_code for n in range(2)] == [503, 429]
        simulator.set_send_faults(None)
        assert {create(client, auth, f"off-{n}").status_code for n in range(5)} == {200}
    assert runs[0] == runs[1]
    assert 200 in runs[0] and {429, 400} <= set(runs[0])
    failed = sum(1 for run in runs for status in run if status != 200)
    assert sum(simulator.fault_counts.values()) == failed + 2
    assert len(simulator.sent_messages()) == 60 - failed + 5


def test_token_faults_are_consumed_one_per_request(simulator: Simulator) -> None:
    simulator.script_token_faults(["5xx-json:500", "5xx-html:504", "429", "refuse"])
    creds = {"app_id": simulator.app_id, "app_secret": simulator.app_secret}
    with http(simulator) as client:
        replies = [client.post(TOKEN_PATH, json=creds) for _ in range(5)]
    assert (replies[0].status_code, replies[0].json()["code"]) == (500, 1)
    assert replies[1].status_code == 504 and "504" in replies[1].text
    assert (replies[2].status_code, replies[2].json()) == (429, RATE_LIMITED)
    assert replies[2].headers["x-ogw-ratelimit-reset"] == "1"
    assert (replies[3].status_code, replies[3].json()["code"]) == (200, 10014)
    assert replies[4].json()["code"] == 0 and replies[4].json()["tenant_access_token"]
    assert simulator.fault_counts == {"token:5xx-json": 1, "token:5xx-html": 1,
                                      "token:429": 1, "token:refuse": 1}
    with pytest.raises(ValueError):
        simulator.script_token_faults(["reset"])


# --- automatic redelivery ---------------------------------------------------------------

StartSim = Callable[..., Simulator]


@pytest.fixture(name="redelivering")
def redelivering_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[StartSim]:
    """`(handler=None, **Simulator options) -> started simulator`, with a connected
    lark.ws.Client when a handler is given; everything stopped at teardown."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    sims: list[Simulator] = []
    clients: list[SdkWsClient] = []

    def start(handler: lark.EventDispatcherHandler | None = None, **options: Any) -> Simulator:
        sims.append(sim := Simulator(**options).start())
        if handler is not None:
            clients.append(SdkWsClient(sim.url, sim.app_id, sim.app_secret, handler).start())
            sim.wait_connected(1)
        return sim

    yield start
    for client in clients:
        client.stop()
    for sim in sims:
        sim.stop()


def test_failed_handler_gets_the_event_again_and_one_200_ack_ends_it(
        redelivering: StartSim) -> None:
    seen: Inbox[Any] = Inbox()
    calls = itertools.count(1)

    def flaky(data: Any) -> None:
        seen.add(data)
        if next(calls) == 1:
            raise RuntimeError("first delivery fails")  # the SDK ACKs it with code 500

    sim = redelivering(message_handler(flaky), redelivery_s=(0.5,))
    mid = sim.send_text("oc_flaky", "try twice")
    acks = sim.wait_for_acks(2)
    assert [(a.code, a.message_id) for a in acks] == [(500, mid), (200, mid)]
    assert acks[0].frame_message_id != acks[1].frame_message_id
    assert sim.wait_redeliveries_settled() == 1
    events = seen.wait_for(2)
    assert len(events) == 2 and len(sim.acks) == 2
    assert events[0].header.event_id == events[1].header.event_id


def test_event_unacked_at_disconnect_is_redelivered_after_reconnect(
        redelivering: StartSim) -> None:
    seen: Inbox[Any] = Inbox()
    release = threading.Event()

    def slow_once(data: Any) -> None:
        seen.add(data)
        release.wait(10)  # the first delivery blocks until the connection is gone

    sim = redelivering(message_handler(slow_once), redelivery_s=(0.5,) * 4)
    endpoint_calls = sim.requests_count("/callback/ws/endpoint")
    mid = sim.send_text("oc_drop", "survive a drop")
    first_frame = sim.state.find_frame(mid)
    assert first_frame is not None
    seen.wait_for(1)
    assert sim.drop_connections() == 1
    release.set()
    ack = sim.wait_for_acks(1)[0]
    assert (ack.code, ack.message_id) == (200, mid)
    assert ack.frame_message_id != first_frame.event_key  # the first frame was never ACKed
    assert sim.wait_redeliveries_settled() >= 1
    assert sim.requests_count("/callback/ws/endpoint") > endpoint_calls  # it reconnected
    events = seen.wait_for(2)
    assert {e.header.event_id for e in events} == {events[0].header.event_id}


def test_200_ack_stops_redelivery_and_a_poison_event_stops_at_the_max(
        redelivering: StartSim) -> None:
    inbox: Inbox[Any] = Inbox()
    sim = redelivering(message_handler(inbox.add), redelivery_s=(0.2, 0.2))
    mid = sim.send_text("oc_ok", "acked at once")
    assert sim.wait_for_acks(1)[0].code == 200
    assert sim.wait_redeliveries_settled() == 0
    assert len(inbox.wait_for(1)) == 1
    poison = sim.send_event(b'{"schema": "2.0", "header": ')  # the SDK ACKs it 500, always
    assert sim.wait_redeliveries_settled() == 2
    acks = sim.acks
    assert [(a.code, a.message_id) for a in acks] == [(200, mid)] + [(500, None)] * 3
    assert acks[1].frame_message_id == poison and len({a.frame_message_id for a in acks}) == 4
    assert len(inbox.wait_for(1)) == 1


def test_a_redelivery_goes_to_the_client_connected_then_and_with_none_that_try_is_lost(
        redelivering: StartSim) -> None:
    """Tries 1 and 2 reach the raw client, which never ACKs; it goes; try 3 finds no client
    (lost, as Feishu's); the client is back by try 4, which it ACKs: nothing more."""
    sim = redelivering(redelivery_s=(0.2, 1.0, 1.0, 1.0))
    creds = {"AppID": sim.app_id, "AppSecret": sim.app_secret}

    def ws_url() -> str:
        reply = requests.post(sim.url + "/callback/ws/endpoint", json=creds, timeout=5)
        return str(reply.json()["data"]["URL"])

    with ws_connect(ws_url(), proxy=None) as raw:
        sim.wait_connected(1)
        frame_id = sim.send_card_action("oc_card", "om_card", "ou_user_3", {"pick": 1})
        first, second = (parse_frame(raw_bytes(raw.recv(timeout=10))) for _ in range(2))
    assert first.headers["message_id"] == frame_id != second.headers["message_id"]
    assert first.payload == second.payload
    sim.state.wait_for(lambda: True if sim.missed_redeliveries == 1 else None, 10,
                       lambda: "waiting for a try to find no client")
    token = requests.post(sim.url + TOKEN_PATH, timeout=5, json={
        "app_id": sim.app_id, "app_secret": sim.app_secret})
    assert token.json()["code"] == 0  # the loop serves on meanwhile
    with ws_connect(ws_url(), proxy=None) as raw:
        again = parse_frame(raw_bytes(raw.recv(timeout=10)))
        assert again.payload == first.payload
        assert again.headers["message_id"] not in (frame_id, second.headers["message_id"])
        raw.send(encode_frame(method=METHOD_DATA, service=again.service, headers=again.headers,
                              payload=json.dumps({"code": 200}).encode()))
        assert sim.wait_for_ack(again.headers["message_id"]).code == 200
        assert sim.wait_redeliveries_settled() == 2 and sim.missed_redeliveries == 1


def test_by_default_an_event_goes_again_on_feishus_schedule_then_never() -> None:
    """15 s after the first try, then 5 min, 1 h and 6 h after the one before: four retries
    (a test passes a shorter schedule; `()` turns it off)."""
    policy = Simulator().redelivery
    assert policy.on and policy.attempts == 4
    assert [policy.delay_s(n) for n in range(4)] == [15.0, 300.0, 3600.0, 21_600.0]
    assert not Simulator(redelivery_s=()).redelivery.on
    with pytest.raises(ValueError, match="positive"):
        Simulator(redelivery_s=(1.0, 0.0))

"""The simulator's apps, silent connections, late events and card callbacks, against the
real lark-oapi SDK (ws.Client and lark.Client) and raw websockets speaking the frames."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import lark_oapi as lark
import pytest
import requests
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    PatchMessageRequest,
    PatchMessageRequestBody,
)
from lark_oapi.event.callback.model.p2_card_action_trigger import (
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect
from websockets.sync.connection import Connection

from gateway.feishu.ws.frames import (
    METHOD_CONTROL,
    METHOD_DATA,
    ParsedFrame,
    encode_frame,
    parse_frame,
)
from gateway.simulator import Simulator
from tests.support.openapi import api_client, reply
from tests.support.simulator_fixtures import Inbox, SdkWsClient, message_handler
from tests.support.simulator_fixtures import simulator as simulator_fixture  # noqa: F401

SECOND_ID, SECOND_SECRET = "cli_second", "second-secret"


def api_client_of(sim: Simulator, app_id: str, app_secret: str) -> lark.Client:
    return (lark.Client.builder().app_id(app_id).app_secret(app_secret)
            .domain(sim.url).log_level(lark.LogLevel.WARNING).build())


def bot_info(client: lark.Client) -> dict[str, Any]:
    info = client.request(
        lark.BaseRequest.builder().http_method(lark.HttpMethod.GET).uri("/open-apis/bot/v3/info")
        .token_types({lark.AccessTokenType.TENANT}).build())
    assert info.code == 0, info.msg
    bot: dict[str, Any] = json.loads(info.raw.content)["bot"]
    return bot


def send_card(client: lark.Client, chat_id: str, card: dict[str, Any]) -> str:
    body = (CreateMessageRequestBody.builder().receive_id(chat_id).msg_type("interactive")
            .content(json.dumps(card)).build())
    created = client.im.v1.message.create(
        CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build())
    assert created.success(), (created.code, created.msg)
    return str(created.data.message_id)


def patch_card(client: lark.Client, message_id: str, card: dict[str, Any]) -> Any:
    return client.im.v1.message.patch(
        PatchMessageRequest.builder().message_id(message_id).request_body(
            PatchMessageRequestBody.builder().content(json.dumps(card)).build()).build())


def endpoint_url(sim: Simulator, app_id: str | None = None, secret: str | None = None) -> str:
    reply = requests.post(sim.url + "/callback/ws/endpoint", timeout=5, json={
        "AppID": app_id or sim.app_id, "AppSecret": secret or sim.app_secret}).json()
    assert reply["code"] == 0, reply
    return str(reply["data"]["URL"])


def raw_client(url: str) -> ClientConnection:
    """A raw long connection; a short close timeout, since a silent server never answers."""
    return ws_connect(url, proxy=None, close_timeout=0.3, ping_interval=None)


def recv_frame(raw: Connection, timeout_s: float = 10) -> ParsedFrame:
    message = raw.recv(timeout=timeout_s)
    assert isinstance(message, bytes), "the simulator sends binary frames only"
    return parse_frame(message)


def feishu_ping(url: str) -> bytes:
    service = int(parse_qs(urlparse(url).query)["service_id"][0])
    return encode_frame(method=METHOD_CONTROL, service=service, headers={"type": "ping"})


def ack_of(frame: ParsedFrame) -> bytes:
    return encode_frame(method=METHOD_DATA, service=frame.service, headers=frame.headers,
                        payload=json.dumps({"code": 200}).encode())


def wait_closes(sim: Simulator, count: int) -> list[int | None]:
    return sim.state.wait_for(
        lambda: codes if len(codes := sim.close_codes) >= count else None, 5,
        lambda: f"waiting for {count} closed connection(s), have {sim.close_codes}")


@pytest.fixture(name="second_app_client")
def second_app_client_fixture(simulator: Simulator) -> Iterator[Inbox[Any]]:
    """The second app registered and a real lark.ws.Client connected as it; the inbox
    gets its messages and card callbacks."""
    simulator.add_app(SECOND_ID, SECOND_SECRET, bot_open_id="ou_bot_two", app_name="Second Bot")
    inbox: Inbox[Any] = Inbox()
    handler = (lark.EventDispatcherHandler.builder("", "")
               .register_p2_im_message_receive_v1(inbox.add)
               .register_p2_card_action_trigger(inbox.add).build())
    client = SdkWsClient(simulator.url, SECOND_ID, SECOND_SECRET, handler).start()
    try:
        simulator.wait_connected(1, app_id=SECOND_ID)
        yield inbox
    finally:
        client.stop()


def test_each_app_gets_its_own_events_tokens_bot_and_messages(
        simulator: Simulator, second_app_client: Inbox[Any]) -> None:
    inbox, sim_id = second_app_client, simulator.app_id
    assert simulator.connection_count == 1 and simulator.state.connections_of(sim_id) == 0
    with raw_client(endpoint_url(simulator)) as primary:
        simulator.wait_connected(1, app_id=sim_id)
        simulator.wait_connected(2)
        second_mid = simulator.send_text("oc_two", "to the second bot", app_id=SECOND_ID)
        primary_mid = simulator.send_text("oc_one", "to the primary bot")
        first = recv_frame(primary)  # the second app's event never reached this connection
        header = json.loads(first.payload)["header"]
        assert (json.loads(first.payload)["event"]["message"]["message_id"], header["app_id"]) \
            == (primary_mid, sim_id)
        event = inbox.wait_for(1)[0]
        assert (event.event.message.message_id, event.header.app_id) == (second_mid, SECOND_ID)
        again = simulator.redeliver(second_mid)  # by default to the app it first went to
        assert [e.event.message.message_id for e in inbox.wait_for(2)] == [second_mid] * 2
        assert simulator.wait_for_ack(again).code == 200
        card_frame = simulator.send_card_action("oc_two", "om_x", "ou_u", {"a": 1},
                                                app_id=SECOND_ID)
        assert simulator.wait_for_ack(card_frame).code == 200
        clicked = inbox.wait_for(3)[2]
        assert (clicked.header.app_id, clicked.event.context.open_message_id) == (SECOND_ID,
                                                                                 "om_x")
        raw_frame = simulator.send_event({"schema": "2.0", "header": {"app_id": "as-is"}},
                                         app_id=sim_id)
        assert recv_frame(primary).headers["message_id"] == raw_frame

    second = api_client_of(simulator, SECOND_ID, SECOND_SECRET)
    first_client = api_client(simulator)
    assert (bot_info(second)["open_id"], bot_info(second)["app_name"]) == ("ou_bot_two",
                                                                           "Second Bot")
    assert bot_info(first_client)["open_id"] == simulator.bot_open_id
    assert simulator.bot_open_id_of(SECOND_ID) == "ou_bot_two"
    assert simulator.mention_bot(app_id=SECOND_ID)["id"]["open_id"] == "ou_bot_two"
    answer = reply(second, second_mid, "from two", uuid="same-uuid")
    assert answer.success() and answer.data.sender.id == SECOND_ID
    assert reply(first_client, primary_mid, "from one", uuid="same-uuid").success()
    [two] = simulator.wait_for_messages(1, app_id=SECOND_ID)
    assert (two.app_id, two.text, two.reply_to) == (SECOND_ID, "from two", second_mid)
    assert [m.app_id for m in simulator.sent_messages()] == [SECOND_ID, sim_id]  # uuid per app
    assert [m.text for m in simulator.sent_messages(app_id=sim_id)] == ["from one"]
    card = send_card(first_client, "oc_one", {"elements": []})
    denied = patch_card(second, card, {"elements": [{"tag": "markdown", "content": "x"}]})
    assert denied.code == 230027  # a bot edits only what it sent

    tokens = {requests.post(simulator.url + "/open-apis/auth/v3/tenant_access_token/internal",
                            json={"app_id": a, "app_secret": s}, timeout=5).json()
              ["tenant_access_token"] for a, s in ((sim_id, simulator.app_secret),
                                                   (SECOND_ID, SECOND_SECRET))}
    assert len(tokens) == 2
    refused = requests.post(simulator.url + "/callback/ws/endpoint", timeout=5,
                            json={"AppID": SECOND_ID, "AppSecret": simulator.app_secret})
    assert refused.json()["code"] not in (0, 1, 1000040343)
    with pytest.raises(ValueError):
        simulator.add_app(SECOND_ID, "other")
    with pytest.raises(KeyError):
        simulator.send_text("oc_one", "x", app_id="cli_unknown")


def test_add_app_before_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    sim = Simulator()
    sim.add_app(SECOND_ID, SECOND_SECRET)
    with sim:
        assert bot_info(api_client_of(sim, SECOND_ID, SECOND_SECRET))["open_id"] == \
            "ou_bot_second"
        with raw_client(endpoint_url(sim, SECOND_ID, SECOND_SECRET)) as raw:
            sim.wait_connected(1, app_id=SECOND_ID)
            assert sim.state.connections_of(sim.app_id) == 0
            mid = sim.send_text("oc_c", "hi", app_id=SECOND_ID)
            payload = json.loads(recv_frame(raw).payload)
            assert payload["event"]["message"]["message_id"] == mid
            sim.delivery_timeout_s = 0.2
            with pytest.raises(TimeoutError):
                sim.send_text("oc_c", "nobody of the primary app is connected")


def test_silent_connection_answers_nothing_and_later_connections_work(
        simulator: Simulator) -> None:
    url = endpoint_url(simulator)
    zombie = raw_client(url)
    simulator.wait_connected(1)
    assert zombie.ping().wait(5), "a live connection answers websocket pings"
    zombie.send(feishu_ping(url))
    assert recv_frame(zombie).frame_type == "pong"
    mid = simulator.send_text("oc_silent", "delivered before it went silent")
    unacked = recv_frame(zombie)

    assert simulator.go_silent() == 1
    assert (simulator.connection_count, simulator.silent_connection_count) == (0, 1)
    with raw_client(endpoint_url(simulator)) as fresh:
        simulator.wait_connected(1)
        after = simulator.send_text("oc_silent", "after")
        assert json.loads(recv_frame(fresh).payload)["event"]["message"]["message_id"] == after
        assert fresh.ping().wait(5)
        zombie.send(ack_of(unacked))  # never read
        zombie.send(feishu_ping(url))
        pong = zombie.ping()
        with pytest.raises(TimeoutError):  # the socket stays open, and nothing comes back
            zombie.recv(timeout=0.5)
        assert not pong.is_set()
        assert [a.message_id for a in simulator.acks] == []
        assert simulator.state.find_frame(mid) is not None

        zombie.close(code=4001)  # no close frame comes back: it gives up, drops the TCP
        assert wait_closes(simulator, 1) == [4001]
        assert simulator.silent_connection_count == 0

        dropped = raw_client(endpoint_url(simulator))
        simulator.wait_connected(2)
        assert simulator.go_silent() == 2
        dropped.socket.shutdown(socket.SHUT_RDWR)  # TCP ends without a close frame
        assert wait_closes(simulator, 2) == [4001, None]
        dropped.close()
        assert simulator.silent_connection_count == 1  # `fresh`, silent now too
    assert wait_closes(simulator, 3)[2] == 1000


def test_late_message_carries_its_create_time(simulator: Simulator) -> None:
    inbox: Inbox[Any] = Inbox()
    client = SdkWsClient(simulator.url, simulator.app_id, simulator.app_secret,
                         message_handler(inbox.add)).start()
    try:
        simulator.wait_connected(1)
        hours_ago = int(time.time() * 1000) - 3 * 3600 * 1000
        mid = simulator.send_text("oc_late", "sent long ago", create_time_ms=hours_ago)
        post = simulator.send_message("oc_late", message_type="post", create_time_ms=hours_ago,
                                      content={"zh_cn": {"content": [[{"tag": "text",
                                                                       "text": "p"}]]}})
        events = inbox.wait_for(2)
    finally:
        client.stop()
    assert [e.event.message.message_id for e in events] == [mid, post]
    assert {e.event.message.create_time for e in events} == {str(hours_ago)}
    for message_id in (mid, post):
        rec = simulator.state.get_message(message_id)
        assert rec is not None and rec.create_time_ms == hours_ago


@pytest.fixture(name="quick_cards")
def quick_cards_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulator]:
    """A simulator judging card answers against 300 ms instead of Feishu's 3 s."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with Simulator(card_answer_limit_ms=300) as sim:
        yield sim


def test_card_answer_in_time_replaces_the_card_and_a_late_one_is_ignored(
        quick_cards: Simulator) -> None:
    sim = quick_cards
    seen: Inbox[P2CardActionTrigger] = Inbox()
    done = {"elements": [{"tag": "markdown", "content": "approved"}]}

    def on_card(data: P2CardActionTrigger) -> P2CardActionTriggerResponse:
        seen.add(data)
        if data.event.action.value.get("slow"):
            time.sleep(0.5)  # a handler slower than the limit
        return P2CardActionTriggerResponse({"toast": {"type": "success", "content": "ok"},
                                            "card": {"type": "raw", "data": done}})

    handler = (lark.EventDispatcherHandler.builder("", "")
               .register_p2_card_action_trigger(on_card).build())
    client = SdkWsClient(sim.url, sim.app_id, sim.app_secret, handler).start()
    try:
        sim.wait_connected(1)
        api = api_client(sim)
        asking = {"elements": [{"tag": "button", "value": {"approve": 1}}]}
        card_id = send_card(api, "oc_cards", asking)
        frame = sim.send_card_action("oc_cards", card_id, "ou_clicker", {"approve": 1})
        answer = sim.card_response(frame)
        assert (answer.code, answer.late, answer.toast) == (
            200, False, {"type": "success", "content": "ok"})
        assert answer.card == {"type": "raw", "data": done} and answer.data is not None
        assert 0 <= answer.latency_ms < 300
        current = sim.get_message(card_id)
        assert current is not None and current.content == done and current.updated
        assert current.history == (asking,)

        slow_id = send_card(api, "oc_cards", asking)
        slow = sim.card_response(sim.send_card_action("oc_cards", slow_id, "ou_clicker",
                                                      {"slow": True}, parts=2))
        assert slow.late and slow.latency_ms > 300 and slow.code == 200
        untouched = sim.get_message(slow_id)
        assert untouched is not None and untouched.content == asking and not untouched.updated

        repeated = sim.send_card_action("oc_cards", card_id, "ou_clicker", {"approve": 1},
                                        token="c-fixed")
        sim.card_response(repeated)
        events = [d.event for d in seen.wait_for(3)]
    finally:
        client.stop()
    assert len({e.token for e in events}) == 3 and events[2].token == "c-fixed"
    assert all(e.token for e in events)
    assert [(e.context.open_message_id, e.context.open_chat_id) for e in events] == [
        (card_id, "oc_cards"), (slow_id, "oc_cards"), (card_id, "oc_cards")]
    assert events[0].operator.open_id == "ou_clicker" and events[0].action.tag == "button"
    with pytest.raises(TimeoutError):
        sim.card_response("no-such-frame", timeout_s=0.1)


def test_bot_card_reads_back_decoded_and_patches(simulator: Simulator) -> None:
    api = api_client(simulator)
    card: dict[str, Any] = {"header": {"title": {"tag": "plain_text", "content": "Plan"}},
            "elements": [{"tag": "markdown", "content": "step 1 …"}]}
    mid = send_card(api, "oc_card_read", card)
    [sent] = simulator.sent_messages("oc_card_read")
    assert (sent.msg_type, sent.content, sent.app_id) == ("interactive", card, simulator.app_id)
    assert sent.text == "Plan\nstep 1 …"
    card["elements"][0]["content"] = "step 2"
    patched = patch_card(api, mid, card)
    assert patched.success(), (patched.code, patched.msg)
    read = simulator.get_message(mid)
    assert read is not None and read.content == card and read.updated
    assert read.history[0]["elements"][0]["content"] == "step 1 …"
    assert simulator.get_message("om_unknown") is None

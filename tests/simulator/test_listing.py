"""The simulator's messages list API (what catch-up reads after an outage): a chat's
history between two times, in pages, sorted; read by the reference SDK, which must parse
it, and over plain HTTP; its faults, its pause, and the outage mode that creates messages
without pushing them."""

from __future__ import annotations

import time
from typing import Any

import lark_oapi as lark
from lark_oapi.api.im.v1 import ListMessageRequest

from gateway.simulator import Simulator
from tests.support.openapi import MESSAGES, Api

T0 = 1_700_000_000_000


def listing(api: Api, chat_id: str, **params: Any) -> dict[str, Any]:
    query = {"container_id_type": "chat", "container_id": chat_id,
             **{k: str(v) for k, v in params.items()}}
    body = api.call("GET", MESSAGES, params=query).json()
    assert body["code"] == 0, body
    return dict(body["data"])


def test_the_list_api_pages_a_chats_history_within_the_times(simulator: Simulator) -> None:
    chat = "oc_history"
    ids = [simulator.send_text(chat, f"m{n}", deliver=False, create_time_ms=T0 + n * 1000)
           for n in range(7)]
    simulator.send_text("oc_other", "elsewhere", deliver=False, create_time_ms=T0 + 2000)
    with Api(simulator) as api:
        seen, token, pages = [], "", 0
        while True:
            data = listing(api, chat, start_time=T0 // 1000 + 1, end_time=T0 // 1000 + 5,
                           sort_type="ByCreateTimeAsc", page_size=2,
                           **({"page_token": token} if token else {}))
            pages += 1
            seen += [(i["message_id"], i["msg_type"], i["sender"]["sender_type"])
                     for i in data["items"]]
            if not data["has_more"]:
                assert data["page_token"] == ""
                break
            token = data["page_token"]
        assert pages == 3
        assert [s[0] for s in seen] == ids[1:6], "seconds 1 to 5, both included, in order"
        assert {s[1:] for s in seen} == {("text", "user")}
        newest = listing(api, chat, sort_type="ByCreateTimeDesc", page_size=3)
        assert [i["message_id"] for i in newest["items"]] == ids[::-1][:3]
        assert newest["items"][0]["create_time"] == str(T0 + 6000)
        assert api.code("GET", MESSAGES, params={"container_id_type": "chat",
                                                 "container_id": chat, "page_size": "51"}) \
            == 99992402
        assert api.code("GET", MESSAGES, params={"container_id_type": "chat",
                                                 "container_id": chat,
                                                 "page_token": "bogus"}) == 99992402


def test_the_reference_sdk_reads_a_page_and_the_bots_replies_are_listed(
        simulator: Simulator) -> None:
    chat = "oc_sdk_list"
    asked = simulator.send_text(chat, "@_user_1 hello", chat_type="group", deliver=False,
                                mentions=[simulator.mention_bot()])
    with Api(simulator) as api:
        assert api.reply(asked, "text", {"text": "hi"}).json()["code"] == 0
    client = lark.Client.builder().app_id(simulator.app_id).app_secret(
        simulator.app_secret).domain(simulator.url).build()
    request = ListMessageRequest.builder().container_id_type("chat").container_id(chat) \
        .sort_type("ByCreateTimeAsc").page_size(20).build()
    response = client.im.v1.message.list(request)
    assert response.success(), response.msg
    items = response.data.items
    assert [i.message_id for i in items][0] == asked and len(items) == 2
    assert items[0].sender.sender_type == "user" and items[1].sender.sender_type == "app"
    assert items[0].mentions[0].id == simulator.bot_open_id
    assert response.data.has_more is False


def test_list_faults_a_pause_and_an_outage(simulator: Simulator) -> None:
    chat = "oc_outage"
    simulator.set_outage(True)
    lost = simulator.send_text(chat, "while no one listens")
    simulator.set_outage(False)
    assert simulator.state.counter("pushes-lost") == 1
    simulator.script_list_faults(["5xx-html", "429"])
    with Api(simulator) as api:
        params = {"container_id_type": "chat", "container_id": chat}
        html = api.call("GET", MESSAGES, params=params)
        assert html.status_code in (502, 504) and "<html>" in html.text
        limited = api.call("GET", MESSAGES, params=params)
        assert limited.status_code == 429 and limited.json()["code"] == 99991400
        assert [i["message_id"] for i in listing(api, chat)["items"]] == [lost]
        simulator.pause_listing(after=1)
        assert listing(api, chat)["items"]
        began = time.monotonic()
        try:
            api.http.request("GET", MESSAGES, params=params, headers=api.auth, timeout=0.5)
        except Exception as error:  # noqa: BLE001 (held: the call times out)
            assert "timed out" in str(error).lower() or "timeout" in type(error).__name__.lower()
        else:
            raise AssertionError("a paused list call was answered")
        assert time.monotonic() - began >= 0.4
        simulator.resume_listing()
        assert listing(api, chat)["items"]
    assert [c.items for c in simulator.list_calls if c.chat_id == chat][0] == (lost,)

"""The simulator's events about messages and chats after the fact, read by the real lark-oapi
SDK's own models, and what its open API answers a bot removed from a chat."""

from __future__ import annotations

import json
from typing import Any

import httpx
import lark_oapi as lark
from lark_oapi.api.im.v1 import CreateMessageRequest, CreateMessageRequestBody

from gateway.simulator import Simulator
from tests.support.openapi import api_client, reply
from tests.support.simulator_fixtures import Inbox, SdkClientFactory
from tests.support.simulator_fixtures import sdk_ws_client as sdk_ws_client_fixture  # noqa: F401
from tests.support.simulator_fixtures import simulator as simulator_fixture  # noqa: F401


def test_the_sdk_reads_recalls_edits_and_the_bots_membership(
        simulator: Simulator, sdk_ws_client: SdkClientFactory) -> None:
    inbox: Inbox[tuple[str, Any]] = Inbox()
    handler = (lark.EventDispatcherHandler.builder("", "")
               .register_p2_im_message_receive_v1(lambda e: inbox.add(("receive", e)))
               .register_p2_im_message_recalled_v1(lambda e: inbox.add(("recalled", e)))
               .register_p2_im_chat_member_bot_added_v1(lambda e: inbox.add(("added", e)))
               .register_p2_im_chat_member_bot_deleted_v1(lambda e: inbox.add(("deleted", e)))
               .register_p2_im_chat_access_event_bot_p2p_chat_entered_v1(
                   lambda e: inbox.add(("entered", e)))
               .register_p2_customized_event("im.message.updated_v1",
                                             lambda e: inbox.add(("updated", e)))
               .build())
    sdk_ws_client(handler)
    simulator.wait_connected(1)
    mid = simulator.send_text("oc_team", "first", chat_type="group")
    edited = httpx.post(f"{simulator.url}/sim/v1/edit", timeout=5,
                        json={"message_id": mid, "text": "second"})
    assert edited.status_code == 200 and edited.json()["frame_id"]
    simulator.recall(mid)
    simulator.add_bot("oc_team", operator_open_id="ou_admin")
    simulator.remove_bot("oc_team", operator_open_id="ou_admin")
    simulator.open_p2p("ou_newcomer")
    got = dict(inbox.wait_for(6))
    updated = got["updated"].event
    assert updated["message"]["message_id"] == mid
    assert json.loads(updated["message"]["content"]) == {"text": "second"}
    assert int(updated["message"]["update_time"]) >= int(updated["message"]["create_time"])
    recalled = got["recalled"].event
    assert (recalled.message_id, recalled.chat_id) == (mid, "oc_team")
    assert int(recalled.recall_time) > 0
    for kind in ("added", "deleted"):
        event = got[kind].event
        assert (event.chat_id, event.operator_id.open_id) == ("oc_team", "ou_admin")
    entered = got["entered"].event
    assert (entered.chat_id, entered.operator_id.open_id) == ("oc_p2p_ou_newcomer", "ou_newcomer")
    assert entered.last_message_id is None, "a first visit names no earlier message"
    assert simulator.state.withdrawn(mid)


def test_a_bot_removed_from_a_chat_gets_230002_for_every_send_there(
        simulator: Simulator) -> None:
    client = api_client(simulator)
    simulator.remove_bot("oc_gone", deliver=False)

    def create(chat_id: str) -> Any:
        body = (CreateMessageRequestBody.builder().receive_id(chat_id).msg_type("text")
                .content(json.dumps({"text": "hello"})).build())
        return client.im.v1.message.create(
            CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body)
            .build())

    assert create("oc_gone").code == 230002
    assert create("oc_here").success()
    mid = simulator.send_text("oc_gone", "sent before", chat_type="group", deliver=False)
    assert reply(client, mid, "hi", uuid="u-1").code == 230002

"""Messages withdrawn or edited by their senders, the bot added to and removed from chats, a
direct chat opened, events of other types: real listener, real workers, the simulator."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator

import httpx
import pytest

from gateway.chats.history import find_turn, read_history
from gateway.chats.keys import ChatKeys
from gateway.feishu.outbound.delivery import reply_uuid
from gateway.ops.embedded_redis import free_port
from gateway.ops.processes import wait_until
from tests.support.replies import agent_events, replies_to, reply_of, started
from tests.support.rig import POOLS, TEST_CANCEL_TIMEOUT_S, Rig, rig_up

WELCOME = "Hello, team: @mention me to ask anything."
GREETING = "Hi! Ask me anything."


@pytest.fixture(scope="module", params=POOLS)
def rig(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Rig]:
    """A gateway per Celery pool (a killed worker: a prefork pool process, or the whole
    threads worker, restarted by its supervisor)."""
    with rig_up(tmp_path_factory, pool=str(request.param), FEISHU_WELCOME_GROUP=WELCOME,
                FEISHU_WELCOME_DM=GREETING, GATEWAY_METRICS_PORT=str(free_port()),
                FEISHU_TYPING="false") as rig:
        yield rig


def history_of(rig: Rig, chat_id: str, message_id: str) -> str:
    record = find_turn(read_history(rig.client(), ChatKeys(chat_id)), message_id)
    return record.outcome if record is not None else ""


def chat_is_empty(rig: Rig, chat_id: str) -> bool:
    client, k = rig.client(), ChatKeys(chat_id)
    return not client.exists(k.inbox, k.lease) and client.zscore("gw:chats", chat_id) is None


def test_a_withdrawn_waiting_message_is_never_answered_the_next_is(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    running = sim.send_text(chat_id, "sleep 2")
    withdrawn = sim.send_text(chat_id, "never mind")
    after = sim.send_text(chat_id, "the next one")
    wait_until(lambda: started(client, chat_id, running), 20, "the first turn")
    sim.recall(withdrawn)
    assert reply_of(sim, chat_id, after) == "echo: the next one"
    assert reply_of(sim, chat_id, running) == "echo: sleep 2"
    assert withdrawn not in replies_to(sim, chat_id)
    assert not started(client, chat_id, withdrawn)
    assert history_of(rig, chat_id, withdrawn) == "withdrawn"


def test_withdrawing_the_running_message_stops_its_turn_and_the_next_is_answered(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    running = sim.send_text(chat_id, "sleep 30")
    after = sim.send_text(chat_id, "after the withdrawn one")
    wait_until(lambda: started(client, chat_id, running), 20, "the long turn")
    sim.recall(running)
    assert reply_of(sim, chat_id, after, timeout_s=TEST_CANCEL_TIMEOUT_S + 10) == \
        "echo: after the withdrawn one"
    assert running not in replies_to(sim, chat_id)
    assert history_of(rig, chat_id, running) == "withdrawn"


def test_a_withdrawn_running_turn_whose_worker_is_killed_is_never_answered(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    running = sim.send_text(chat_id, "hang 30")
    after = sim.send_text(chat_id, "after the killed one")
    wait_until(lambda: started(client, chat_id, running), 20, "the stuck turn")
    pid = next(e["pid"] for e in agent_events(client, chat_id) if e["message_id"] == running)
    os.kill(pid, signal.SIGKILL)
    sim.recall(running)
    assert reply_of(sim, chat_id, after, timeout_s=30) == "echo: after the killed one"
    assert running not in replies_to(sim, chat_id)
    assert [e["message_id"] for e in agent_events(client, chat_id)
            if e["event"] == "start"].count(running) == 1, "never run again"
    assert history_of(rig, chat_id, running) == "withdrawn"


def test_a_message_recalled_before_it_arrives_is_never_answered(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    early = sim.send_text(chat_id, "recalled before delivery", deliver=False)
    sim.wait_for_ack(str(sim.recall(early)))
    sim.wait_for_ack(sim.deliver_held(early))
    marker = sim.send_text(chat_id, "marker")
    assert reply_of(sim, chat_id, marker) == "echo: marker"
    assert early not in replies_to(sim, chat_id)
    assert not started(client, chat_id, early)


def test_an_edited_waiting_message_is_answered_once_with_its_new_text(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    running = sim.send_text(chat_id, "sleep 2")
    edited = sim.send_text(chat_id, "the first version")
    wait_until(lambda: started(client, chat_id, running), 20, "the first turn")
    sim.wait_for_ack(sim.edit(edited, "the second version"))
    assert reply_of(sim, chat_id, edited) == "echo: the second version"
    assert reply_of(sim, chat_id, running) == "echo: sleep 2"


def test_an_edited_answered_message_gets_nothing_more(rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    answered = sim.send_text(chat_id, "before the edit")
    assert reply_of(sim, chat_id, answered) == "echo: before the edit"
    sim.wait_for_ack(sim.edit(answered, "after the edit"))
    marker = sim.send_text(chat_id, "marker")
    assert reply_of(sim, chat_id, marker) == "echo: marker"
    assert replies_to(sim, chat_id)[answered] == ["echo: before the edit"]
    assert [e["text"] for e in agent_events(client, chat_id)
            if e["message_id"] == answered and e["event"] == "start"] == ["before the edit"]


def test_the_bot_removed_while_messages_wait_and_one_runs_sends_nothing(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    running = sim.send_text(chat_id, "hang 4", chat_type="group")
    waiting = [sim.send_text(chat_id, f"w{n}", chat_type="group") for n in range(2)]
    wait_until(lambda: started(client, chat_id, running), 20, "the running turn")
    sim.remove_bot(chat_id)
    wait_until(lambda: chat_is_empty(rig, chat_id), TEST_CANCEL_TIMEOUT_S + 10,
               "the chat's state to be empty")
    wait_until(lambda: any(e["event"] == "end" and e["message_id"] == running
                           for e in agent_events(client, chat_id)), 10, "the hung agent")
    assert sim.sent_messages(chat_id) == []
    assert not any(started(client, chat_id, w) for w in waiting)
    assert {history_of(rig, chat_id, m) for m in [running, *waiting]} == {"removed"}


def test_a_reply_to_a_chat_the_bot_left_is_given_up_at_once_and_recorded(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    orphan = sim.send_text(chat_id, "sleep 1", chat_type="group")
    wait_until(lambda: started(client, chat_id, orphan), 20, "the turn")
    sim.remove_bot(chat_id, deliver=False)  # its event is lost: the reply is in flight
    wait_until(lambda: chat_is_empty(rig, chat_id), 20, "the chat to go on")
    assert sim.send_attempts(reply_uuid(orphan)) == 1, "refused once, never retried"
    assert sim.sent_messages(chat_id) == []
    assert f"the bot is no longer in chat {chat_id}" in rig.fleet.logs("worker")
    records = [json.loads(raw) for raw in client.lrange("gw:undelivered", 0, -1)]
    assert [r["message_id"] for r in records if r["chat_id"] == chat_id] == [orphan]


def test_the_bot_added_to_a_group_says_its_welcome_once(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    frame = sim.add_bot(chat_id)
    wait_until(lambda: sim.sent_messages(chat_id), 20, "the welcome")
    [welcome] = sim.sent_messages(chat_id)
    assert welcome.text == WELCOME and welcome.reply_to is None
    sim.wait_for_ack(sim.redeliver(frame))
    marker = sim.send_text(chat_id, "marker", chat_type="group")
    assert reply_of(sim, chat_id, marker) == "echo: marker"
    assert [m.text for m in sim.sent_messages(chat_id)] == [WELCOME, "echo: marker"]


def test_a_user_opening_the_direct_chat_the_first_time_is_greeted_once(rig: Rig) -> None:
    sim = rig.sim
    chat_id = "oc_p2p_ou_newcomer"  # (a simulator and a Redis per rig)
    sim.open_p2p("ou_newcomer", chat_id=chat_id)
    wait_until(lambda: sim.sent_messages(chat_id), 20, "the greeting")
    assert [m.text for m in sim.sent_messages(chat_id)] == [GREETING]
    sim.wait_for_ack(sim.open_p2p("ou_newcomer", chat_id=chat_id))  # a second visit
    marker = sim.send_text(chat_id, "marker", sender_open_id="ou_newcomer")
    assert reply_of(sim, chat_id, marker) == "echo: marker"
    assert [m.text for m in sim.sent_messages(chat_id)] == [GREETING, "echo: marker"]


def test_an_event_of_a_type_not_handled_is_acked_and_counted(rig: Rig) -> None:
    sim, port = rig.sim, rig.env["GATEWAY_METRICS_PORT"]
    frame = sim.send_event({"schema": "2.0", "header": {
        "event_id": "ev_unhandled_1", "event_type": "im.chat.updated_v1",
        "create_time": "1", "app_id": sim.app_id}, "event": {"chat_id": "oc_x"}})
    assert sim.wait_for_ack(frame).code == 200
    series = 'gateway_events_unhandled_total{type="im.chat.updated_v1"} 1.0'
    wait_until(lambda: series in httpx.get(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5).text, 10, "the unhandled event counted")
    for n, made_up in enumerate(["im.\udc00", "x" * 5000]):  # no label carries these
        frame = sim.send_event({"schema": "2.0", "header": {
            "event_id": f"ev_made_up_{n}", "event_type": made_up, "create_time": "1",
            "app_id": sim.app_id}, "event": {}})
        assert sim.wait_for_ack(frame).code == 200
    other = 'gateway_events_unhandled_total{type="other"} 2.0'
    wait_until(lambda: other in httpx.get(f"http://127.0.0.1:{port}/metrics",
                                           timeout=5).text, 10, "the made-up types counted")

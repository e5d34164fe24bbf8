"""Topics side by side (GATEWAY_ORDER_SCOPE=thread, the default): each thread or topic of a
group is its own queue, so a slow turn in one topic delays nothing in another, everything a
turn sends lands in its topic, `/stop` acts on the topic it is sent in, each topic keeps its
order through a worker SIGKILL, and the operator sees every topic of a chat."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from gateway.ops.processes import wait_until
from gateway.simulator import SentMessage, Simulator
from tests.support.cards import click_stop, closed
from tests.support.cli import ok, read
from tests.support.replies import agent_events, button, replies_to, reply_of, started
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, concurrency=3) as rig:
        yield rig


def in_topic(sim: Simulator, chat: str, thread: str, text: str) -> str:
    return sim.send_text(chat, text, chat_type="group", thread_id=thread)


def ended(events: redis.Redis, chat: str, message_id: str) -> bool:
    return any(e["event"] == "end" and e["message_id"] == message_id
               for e in agent_events(events, chat))


def test_a_slow_turn_in_one_topic_delays_nothing_in_another_and_stop_stays_in_its_topic(
        rig: Rig) -> None:
    sim, events, chat = rig.sim, rig.client(), "oc_topics_side"
    slow = in_topic(sim, chat, "omt_slow", "sleep 60")
    own = sim.send_text(chat, "sleep 60", chat_type="group")  # (the chat's own queue)
    wait_until(lambda: started(events, chat, slow) and started(events, chat, own), 20,
               "the slow turns of the topic and of the chat to start")
    # a reply to the topic's first message that is no topic (a root_id alone) waits in the
    # chat's own queue, behind its running turn
    root_only = sim.send_text(chat, "not a topic", chat_type="group", root_id=slow,
                              parent_id=slow)
    quick = in_topic(sim, chat, "omt_quick", "quick one")
    assert reply_of(sim, chat, quick, 20) == "echo: quick one"
    [answer] = [m for m in sim.sent_messages(chat) if m.reply_to == quick]
    assert answer.thread_id == "omt_quick", "the answer lands in its topic"
    assert not ended(events, chat, slow) and not started(events, chat, root_only)

    shown = read(rig.env, "chat", chat)
    topics = {t["chat_id"]: t for t in shown["topics"]}
    assert topics[f"{chat}/omt_slow"]["state"] == "running"
    assert topics[f"{chat}/omt_slow"]["message_id"] == slow
    assert shown["turn"]["message_id"] == own and shown["pending"]["count"] == 2
    assert f"{chat}/omt_slow: running {slow}" in ok(rig.env, "chat", chat)

    stop_outside = sim.send_text(chat, "/stop", chat_type="group")
    assert reply_of(sim, chat, stop_outside, TEST_CANCEL_TIMEOUT_S + 10).startswith("Stopped.")
    assert reply_of(sim, chat, root_only, 20) == "echo: not a topic"
    assert not ended(events, chat, slow), "a /stop outside the topic leaves its turn running"
    stop_topic = in_topic(sim, chat, "omt_slow", "/stop")
    assert reply_of(sim, chat, stop_topic, TEST_CANCEL_TIMEOUT_S + 10).startswith("Stopped.")
    [said] = [m for m in sim.sent_messages(chat) if m.reply_to == stop_topic]
    assert said.thread_id == "omt_slow", "the confirmation lands in the topic"
    wait_until(lambda: ended(events, chat, slow), 10, "the topic's turn to end")
    assert slow not in replies_to(sim, chat) and own not in replies_to(sim, chat)


def test_each_topic_keeps_its_order_through_a_worker_kill(rig: Rig) -> None:
    sim, events, chat = rig.sim, rig.client(), "oc_topics_kill"
    sent: dict[str, list[str]] = {"omt_a": [], "omt_b": []}
    sent["omt_a"].append(in_topic(sim, chat, "omt_a", "crashonce topic-a first of a"))
    sent["omt_b"].append(in_topic(sim, chat, "omt_b", "sleep 1 first of b"))
    for n in range(1, 4):
        for thread in sent:
            sent[thread].append(in_topic(sim, chat, thread, f"{thread} {n}"))
    every = [m for ids in sent.values() for m in ids]
    wait_until(lambda: all(m in replies_to(sim, chat) for m in every), 90,
               "every message of both topics answered")
    replies = replies_to(sim, chat)
    assert all(len(replies[m]) == 1 for m in every), "each answered once"
    firsts: list[str] = []
    for e in agent_events(events, chat):
        if e["event"] == "start" and e["message_id"] not in firsts:
            firsts.append(e["message_id"])
    for thread, ids in sent.items():
        assert [m for m in firsts if m in ids] == ids, f"topic {thread} in order"
    for thread, ids in sent.items():
        for m in ids:
            [answer] = [s for s in sim.sent_messages(chat) if s.reply_to == m]
            assert answer.thread_id == thread


def test_the_stop_button_and_an_approval_act_on_their_topic(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_topics_buttons"
    streaming = in_topic(sim, chat, "omt_stream", "stream 80 0.2")
    other = in_topic(sim, chat, "omt_other", "stream 30 0.2")
    card = wait_until(lambda: next((m for m in sim.sent_messages(chat)
                                    if m.reply_to == streaming and m.card_id), None), 20,
                      "the streaming card")
    assert isinstance(card, SentMessage) and card.thread_id == "omt_stream"
    click_stop(sim, chat, card, "ou_user_1")
    wait_until(lambda: closed(sim, card), 15, "the topic's card closed by its Stop button")
    wait_until(lambda: any("w29" in t for t in replies_to(sim, chat).get(other, [])), 30,
               "the other topic answered whole: the Stop click stopped only its own topic")
    asked = in_topic(sim, chat, "omt_ask", "approve 60 tool May I run the tool?")
    ask = wait_until(lambda: next((m for m in sim.sent_messages(chat) if m.reply_to == asked
                                   and m.msg_type == "interactive"), None), 30, "the card")
    assert isinstance(ask, SentMessage) and ask.thread_id == "omt_ask"
    frame = sim.send_card_action(chat, ask.message_id, "ou_user_1", button(ask, "once"))
    assert not sim.card_response(frame, timeout_s=10).late
    wait_until(lambda: "decision: once" in replies_to(sim, chat).get(asked, []), 30,
               "the turn's answer after the click in its topic")

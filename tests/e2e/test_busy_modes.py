"""Busy modes with real workers, listeners, Redis and the simulator. Merge (the rig's
default): a burst becomes one turn answered once, through two listeners, a SIGKILLed worker
and a redelivery; /stop and /new while a merged turn waits or runs. Interrupt (the chats
`oc_hasty_*`, by their group rule): a new message stops the running turn and the next turn
answers both. (Queue mode, the default, is what the rest of the e2e suite runs:
test_cancel.py for its /stop and /new.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis

from gateway.chats.history import read_history
from gateway.chats.keys import ChatKeys
from gateway.feishu.outbound.stream_card import INTERRUPTED_MARK
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from tests.support.cli import ok, read
from tests.support.replies import agent_events, replies_to, reply_of, started
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, TEST_LEASE_TTL_S, Rig, rig_up

WINDOW_MS = 1500
HASTY = [f"oc_hasty_{n}" for n in range(5)]
"""Chats whose group rule says busy mode interrupt."""


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    rules = json.dumps({chat: {"busy": "interrupt"} for chat in HASTY})
    with rig_up(tmp_path_factory, start="nothing", GATEWAY_BUSY_MODE="merge",
                GATEWAY_MERGE_WINDOW_MS=str(WINDOW_MS), FEISHU_GROUP_RULES=rules) as rig:
        rig.up()
        rig.listener()  # a second listener: the simulator hands them events in turn
        rig.sim.wait_connected(2, timeout_s=30)
        yield rig


def burst(sim: Simulator, chat_id: str, texts: tuple[str, ...]) -> list[str]:
    """Messages typed in quick succession (10 ms apart by Feishu's create_time: the two
    listeners may admit them in either order, the inbox orders them by it)."""
    now = int(time.time() * 1000)
    return [sim.send_text(chat_id, text, create_time_ms=now - 10 * (len(texts) - 1 - n))
            for n, text in enumerate(texts)]


def starts(client: redis.Redis, chat_id: str) -> list[str]:
    return [e["message_id"] for e in agent_events(client, chat_id) if e["event"] == "start"]


def merged_echo(*texts: str) -> list[str]:
    """The lines of the scripted agent's echo of a merged turn, without their times."""
    return [f"ou_user_1: {t}" for t in texts]


def lines_of(reply: str) -> list[str]:
    assert reply.startswith("echo: "), reply
    return [line.split("] ", 1)[1] for line in reply.removeprefix("echo: ").split("\n")]


def only_replies(sim: Simulator, chat_id: str) -> dict[str, list[str]]:
    return {k: v for k, v in replies_to(sim, chat_id).items() if v}


def test_a_burst_through_two_listeners_is_one_turn_answered_once(rig: Rig,
                                                                 chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    assert sim.connection_count == 2, "the burst is handed to both listeners in turn"
    ids = burst(sim, chat_id, ("so", "about the report", "is it done?"))
    reply = reply_of(sim, chat_id, ids[-1])
    assert lines_of(reply) == merged_echo("so", "about the report", "is it done?")
    assert starts(client, chat_id) == [ids[-1]], "one turn for the three"
    wait_until(lambda: not client.exists(ChatKeys(chat_id).lease), 10, "the chat to go idle")
    assert only_replies(sim, chat_id) == {ids[-1]: [reply]}, "answered once, to the last"
    records = read_history(client, ChatKeys(chat_id))
    assert sorted(r.message_id for r in records) == sorted(ids)
    assert {r.outcome for r in records} == {"replied"}
    for message_id in ids:  # Feishu delivers one again: a duplicate, not a new turn
        sim.redeliver(message_id)
    follow_up = sim.send_text(chat_id, "thanks")
    assert reply_of(sim, chat_id, follow_up) == "echo: thanks"
    assert starts(client, chat_id) == [ids[-1], follow_up]


def test_messages_sent_while_a_turn_runs_are_answered_together_next(rig: Rig,
                                                                    chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    first = sim.send_text(chat_id, "sleep 4")
    wait_until(lambda: started(client, chat_id, first), 20, "the first turn")
    later = burst(sim, chat_id, ("one", "two", "three"))
    assert reply_of(sim, chat_id, first) == "echo: sleep 4"
    assert lines_of(reply_of(sim, chat_id, later[-1])) == merged_echo("one", "two", "three")
    assert starts(client, chat_id) == [first, later[-1]]
    assert set(only_replies(sim, chat_id)) == {first, later[-1]}


def test_a_merged_turn_whose_worker_is_killed_is_answered_once_by_its_rerun(
        rig: Rig, chat_id: str) -> None:
    """The worker dies (SIGKILL) mid-turn; the re-run answers the same messages once, and the
    messages sent after the turn first started (before its re-run or during it) wait and
    are answered together next."""
    sim, client = rig.sim, rig.client()
    ids = burst(sim, chat_id, ("first", f"crashonce {chat_id}"))
    wait_until(lambda: len(starts(client, chat_id)) >= 1, 20, "the merged turn to start")
    fence = client.hget(ChatKeys(chat_id).lease, "fence")
    late = [sim.send_text(chat_id, "meanwhile")]
    wait_until(lambda: client.hget(ChatKeys(chat_id).lease, "fence") != fence,
               TEST_LEASE_TTL_S + 10, "the killed turn to be claimed again")
    late.append(sim.send_text(chat_id, "and another"))
    reply = reply_of(sim, chat_id, ids[-1], timeout_s=TEST_LEASE_TTL_S + 30)
    assert lines_of(reply) == merged_echo("first", f"crashonce {chat_id}")
    assert lines_of(reply_of(sim, chat_id, late[-1])) == merged_echo("meanwhile",
                                                                     "and another")
    assert starts(client, chat_id) == [ids[-1], ids[-1], late[-1]], "re-run once, then the rest"
    assert set(only_replies(sim, chat_id)) == {ids[-1], late[-1]}
    for message_id in ids:
        sim.redeliver(message_id)
    again = sim.send_text(chat_id, "done?")
    assert reply_of(sim, chat_id, again) == "echo: done?"
    assert replies_to(sim, chat_id)[ids[-1]] == [reply], "never answered twice"


def test_stop_while_a_merged_turn_runs_drops_its_messages_and_answers_the_next(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    ids = burst(sim, chat_id, ("context", "sleep 30"))
    wait_until(lambda: started(client, chat_id, ids[-1]), 20, "the merged turn")
    later = sim.send_text(chat_id, "next question")
    stop = sim.send_text(chat_id, "/stop")
    assert reply_of(sim, chat_id, stop) == (
        "Stopped. 1 waiting message(s) will be answered next.")
    assert reply_of(sim, chat_id, later) == "echo: next question"
    assert set(only_replies(sim, chat_id)) == {stop, later}
    outcomes = {r.message_id: r.outcome for r in read_history(client, ChatKeys(chat_id))}
    assert outcomes[ids[0]] == outcomes[ids[1]] == "stopped"


def test_new_before_a_merged_turn_starts_drops_what_was_typed_before_it(
        rig: Rig, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    typed = burst(sim, chat_id, ("old topic", "more of it"))
    # (both admitted first: with two listeners, one typed before /new may otherwise reach
    # the other listener after it, the one race a command cannot see: docs/design.md)
    wait_until(lambda: all(any(a.code == 200 for a in sim.acks_of(m)) for m in typed), 10,
               "the typed messages admitted")
    reset = sim.send_text(chat_id, "/new")
    assert reply_of(sim, chat_id, reset).startswith("Stopped. New conversation started")
    fresh = sim.send_text(chat_id, "new topic")
    assert reply_of(sim, chat_id, fresh) == "echo: new topic"
    assert starts(client, chat_id) == [fresh], "what was typed before /new never ran"
    assert set(only_replies(sim, chat_id)) == {reset, fresh}
    assert typed[0] not in replies_to(sim, chat_id)


def test_a_new_message_interrupts_the_running_turn_and_the_next_answers_both(
        rig: Rig) -> None:
    sim, client, chat_id = rig.sim, rig.client(), HASTY[0]
    first = sim.send_text(chat_id, "sleep 30")
    wait_until(lambda: started(client, chat_id, first), 20, "the first turn")
    second = sim.send_text(chat_id, "never mind, just say hi")
    reply = reply_of(sim, chat_id, second, timeout_s=TEST_CANCEL_TIMEOUT_S + 10)
    assert lines_of(reply) == merged_echo("sleep 30", "never mind, just say hi")
    assert starts(client, chat_id) == [first, second]
    assert only_replies(sim, chat_id) == {second: [reply]}


    def outcomes() -> set[tuple[str, str]] | None:  # recorded once the reply went out
        found = {(r.message_id, r.outcome) for r in read_history(client, ChatKeys(chat_id))}
        return found if (first, "replied") in found else None

    recorded = wait_until(outcomes, 10, "the merged turn recorded")
    assert isinstance(recorded, set) and (first, "interrupted") in recorded
    for message_id in (first, second):  # Feishu delivers them again: duplicates
        sim.redeliver(message_id)
    after = sim.send_text(chat_id, "bye")
    assert reply_of(sim, chat_id, after) == "echo: bye"
    assert starts(client, chat_id) == [first, second, after]


def test_an_interrupted_stream_is_marked_interrupted(rig: Rig) -> None:
    sim, client, chat_id = rig.sim, rig.client(), HASTY[1]
    first = sim.send_text(chat_id, "stream 60 0.2")
    wait_until(lambda: [m for m in sim.sent_messages(chat_id) if m.reply_to == first], 20,
               "the streaming card")
    second = sim.send_text(chat_id, "and also this")
    reply = reply_of(sim, chat_id, second, timeout_s=TEST_CANCEL_TIMEOUT_S + 10)
    assert lines_of(reply) == merged_echo("stream 60 0.2", "and also this")
    [card] = [m for m in sim.sent_messages(chat_id) if m.reply_to == first]
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=10)
    assert INTERRUPTED_MARK in view.text and view.elements["answer"].startswith("w")
    assert starts(client, chat_id) == [first, second]


def test_a_turn_ignoring_the_interrupt_is_fenced_after_the_cancel_timeout(rig: Rig) -> None:
    sim, client, chat_id = rig.sim, rig.client(), HASTY[2]
    first = sim.send_text(chat_id, "hang 12")
    wait_until(lambda: started(client, chat_id, first), 20, "the first turn")
    second = sim.send_text(chat_id, "hello?")
    reply = reply_of(sim, chat_id, second, timeout_s=TEST_CANCEL_TIMEOUT_S + 10)
    assert lines_of(reply) == merged_echo("hang 12", "hello?")
    wait_until(lambda: [e["event"] for e in agent_events(client, chat_id)].count("end") == 2,
               20, "the hung turn to end")
    assert only_replies(sim, chat_id) == {second: [reply]}, "the fenced turn never replied"


def test_interrupt_mode_under_a_sigkill_stop_and_new(rig: Rig) -> None:
    """A merged turn whose worker is killed is answered once by its re-run; /stop and /new
    stop a running turn (a command never interrupts: it is the stop)."""
    sim, client, chat_id = rig.sim, rig.client(), HASTY[3]
    ids = burst(sim, chat_id, ("first", f"crashonce {chat_id}"))
    reply = reply_of(sim, chat_id, ids[-1], timeout_s=TEST_LEASE_TTL_S + 30)
    assert lines_of(reply) == merged_echo("first", f"crashonce {chat_id}")
    assert starts(client, chat_id) == [ids[-1], ids[-1]]
    long_turn = sim.send_text(chat_id, "sleep 30")
    wait_until(lambda: started(client, chat_id, long_turn), 20, "the long turn")
    stop = sim.send_text(chat_id, "/stop")
    assert reply_of(sim, chat_id, stop) == "Stopped."
    after = sim.send_text(chat_id, "hi again")
    assert reply_of(sim, chat_id, after) == "echo: hi again"
    another = sim.send_text(chat_id, "sleep 30")
    wait_until(lambda: started(client, chat_id, another), 20, "another long turn")
    reset = sim.send_text(chat_id, "/new")
    assert reply_of(sim, chat_id, reset) == "Stopped. New conversation started."
    fresh = sim.send_text(chat_id, "new topic")
    assert reply_of(sim, chat_id, fresh) == "echo: new topic"
    assert set(only_replies(sim, chat_id)) == {ids[-1], stop, after, reset, fresh}


def test_chat_from_another_shell_shows_the_mode_the_chat_keeps(rig: Rig) -> None:
    """A second shell without GATEWAY_BUSY_MODE (the demo's operator terminal) still sees
    the chat's own mode: the one its state in Redis keeps."""
    sim, chat_id = rig.sim, "oc_busy_other_shell"
    running = sim.send_text(chat_id, "sleep 20")
    wait_until(lambda: started(rig.client(), chat_id, running), 20, "the turn to start")
    shell = {k: v for k, v in rig.env.items() if k != "GATEWAY_BUSY_MODE"}
    shown = ok(shell, "chat", chat_id)
    assert "busy mode: merge (kept in Redis" in shown, shown
    assert read(shell, "chat", chat_id)["busy"] == "merge"
    sim.send_text(chat_id, "/stop")

"""Streaming cards end to end: progress steps shown in order above the answer and listed
when it ends; the Stop button (requester, stranger, admin, a click delivered twice); Feishu's
limit of 10 card updates a second, measured by the simulator; streaming closed on Feishu's
side mid-answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.simulator.cardjson import nodes
from gateway.simulator.cards import CardView
from gateway.simulator.records import SentMessage
from tests.support.cards import click_stop, closed, stop_button
from tests.support.replies import replies_to
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, TEST_LEASE_TTL_S, Rig, rig_up

REQUESTER, ADMIN, STRANGER = "ou_requester", "ou_admin", "ou_stranger"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """Updates asked for every 50 ms: twice what Feishu takes on one card; a /stop's
    debounce long enough that a click never outruns it by chance."""
    with rig_up(tmp_path_factory, FEISHU_STREAM_INTERVAL_MS="50", FEISHU_ADMINS=ADMIN,
                GATEWAY_STOP_DEBOUNCE_S="30") as rig:
        yield rig


def the_card(sim: Simulator, chat_id: str, asked: str) -> SentMessage:
    wait_until(lambda: asked in replies_to(sim, chat_id), 20, "the streaming card")
    [card] = [m for m in sim.sent_messages(chat_id) if m.reply_to == asked]
    assert card.msg_type == "interactive" and card.card_id, card
    return card


def test_progress_steps_show_in_order_and_the_closed_card_lists_them(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "steps 4 0.3", sender_open_id=REQUESTER)
    card = the_card(sim, chat_id, asked)
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    shown = [line for text in view.history for line in text.split("\n")
             if line.startswith("⏳")]
    assert [line for n, line in enumerate(shown) if line not in shown[:n]] == [
        f"⏳ step {n}" for n in range(4)], "each step shown while it ran, in order"
    lines = view.text.split("\n")
    assert lines[0] == "done after 4 steps"
    assert lines[1].startswith("4 steps · ") and lines[2].startswith("1. step 0 (")
    assert [line.split(" (")[0] for line in lines[2:6]] == [f"{n + 1}. step {n}"
                                                            for n in range(4)]
    assert not [n for n in nodes(view.card.get("body")) if n.get("tag") == "button"]
    assert view.busiest_second <= 10 and view.rejected == 0


def test_a_fast_stream_updates_its_card_at_most_ten_times_a_second(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "stream 80 0.02")
    card = the_card(sim, chat_id, asked)
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    assert view.elements["answer"].split() == [f"w{n}" for n in range(80)]
    assert view.updates >= 8, "it did stream"
    assert view.busiest_second <= 10 and view.rejected == 0, "within Feishu's 10 a second"


def test_the_requester_stops_the_turn_with_the_button_and_the_card_says_who(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "steps 200 0.1", sender_open_id=REQUESTER)
    card = the_card(sim, chat_id, asked)
    value = stop_button(sim.wait_for_card(card.message_id, streaming=True))
    answer = click_stop(sim, chat_id, card, REQUESTER, token="tok-requester", value=value)
    assert answer.toast["type"] == "success"
    again = click_stop(sim, chat_id, card, REQUESTER, token="tok-requester", value=value)
    assert again.toast["type"] == "success", "Feishu's redelivery is answered the same"
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    assert f"⏹ Stopped by <at id={REQUESTER}></at>" in view.text
    assert "step 199" not in view.text
    wait_until(lambda: "cancel chat=" in rig.fleet.logs("listener"), 10, "the stop's end")
    log = rig.fleet.logs("listener")
    assert log.count("stop click in chat") == 2 and log.count(": duplicate") == 1
    assert log.count("cancel chat=") == 1, "one stop"


def test_a_strangers_click_is_refused_and_an_admins_stops_the_turn(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "steps 200 0.1", sender_open_id=REQUESTER)
    card = the_card(sim, chat_id, asked)
    refused = click_stop(sim, chat_id, card, STRANGER)
    assert refused.toast["type"] == "error" and "may not" in refused.toast["content"]
    before = len(sim.wait_for_card(card.message_id).history)
    going = wait_until(lambda: next((v for v in [sim.card_of(card.message_id)]
                                     if v is not None and len(v.history) > before + 2), None),
                       10, "the turn going on after the stranger's click")
    assert isinstance(going, CardView) and going.streaming_mode
    elsewhere = click_stop(sim, "oc_another_chat", card, REQUESTER,
                           value=stop_button(going))  # its value shown in another chat
    assert elsewhere.toast["type"] == "error"
    click_stop(sim, chat_id, card, ADMIN)
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    assert f"⏹ Stopped by <at id={ADMIN}></at>" in view.text


def test_a_click_just_after_a_stop_of_the_turn_before_stops_its_own_turn(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    first = sim.send_text(chat_id, "steps 200 0.1", sender_open_id=REQUESTER)
    the_card(sim, chat_id, first)
    second = sim.send_text(chat_id, "steps 200 0.1", sender_open_id=REQUESTER)
    stop = sim.send_text(chat_id, "/stop", sender_open_id=REQUESTER)
    wait_until(lambda: stop in replies_to(sim, chat_id), 20, "the /stop's answer")
    card = the_card(sim, chat_id, second)  # within the /stop's debounce
    assert click_stop(sim, chat_id, card, REQUESTER).toast["type"] == "success"
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=15)
    assert f"⏹ Stopped by <at id={REQUESTER}></at>" in view.text, "not debounced away"


def test_streaming_closed_on_feishus_side_is_turned_on_again_and_closed_with_the_answer(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    sim.set_card_streaming_s(0.6)
    try:
        asked = sim.send_text(chat_id, "stream 30 0.1")
        card = the_card(sim, chat_id, asked)
        view = wait_until(lambda: closed(sim, card), 20, "the card closed by the gateway")
        assert isinstance(view, CardView)
    finally:
        sim.set_card_streaming_s(600.0)
    assert view.elements["answer"].split() == [f"w{n}" for n in range(30)]
    assert view.rejected >= 1, "Feishu closed streaming (200850) at least once"
    assert any("w25" in text for text in view.history[:-1]), \
        "the text went on growing after streaming closed on Feishu's side"


@pytest.mark.parametrize("command", ["/stop", "/new"])
def test_a_stop_of_a_streaming_answer_is_said_once_on_its_card(
        rig: Rig, chat_id: str, command: str) -> None:
    """The card says "Stopped."; the command gets a reaction, and a line only for what the
    card cannot say (a new conversation)."""
    sim = rig.sim
    asked = sim.send_text(chat_id, "stream 400 0.05", sender_open_id=REQUESTER)
    card = the_card(sim, chat_id, asked)
    wait_until(lambda: "w5" in getattr(sim.card(card.card_id or ""), "text", ""), 20,
               "the answer to grow")
    stop = sim.send_text(chat_id, command, sender_open_id=REQUESTER)
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    assert "⏹ Stopped." in view.text
    if command == "/stop":
        wait_until(lambda: sim.reactions(stop) == ["DONE"], 20, "the /stop confirmed")
        assert stop not in replies_to(sim, chat_id), "said once: on the card"
    else:
        wait_until(lambda: stop in replies_to(sim, chat_id), 20, "the /new's answer")
        assert replies_to(sim, chat_id)[stop] == ["New conversation started."]


@pytest.mark.parametrize(("when", "by"), [("within-its-lease", "click"),
                                          ("after-its-lease-ran-out", "click"),
                                          ("within-its-lease", "command")])
def test_a_stop_while_the_turns_worker_is_dead_closes_its_card_with_the_text_shown(
        tmp_path_factory: pytest.TempPathFactory, when: str, by: str) -> None:
    """Nobody is left to close the card: once the stop ended the turn (fenced off after the
    cancel timeout, or its lease ran out and the run again was dropped before it started),
    the listener closes it, with the text the card showed and who stopped it (a /stop is
    then confirmed with a reaction: the card says it)."""
    with rig_up(tmp_path_factory, start="listener", kill=True,
                FEISHU_STREAM_INTERVAL_MS="50") as rig:
        sim, chat_id = rig.sim, f"oc_stop_dead_worker_{when}"
        worker = rig.fleet("worker")
        asked = sim.send_text(chat_id, "stream 400 0.05", sender_open_id=REQUESTER)
        card = the_card(sim, chat_id, asked)
        value = stop_button(sim.wait_for_card(card.message_id, streaming=True))
        wait_until(lambda: "w10" in getattr(sim.card(card.card_id or ""), "text", ""), 20,
                   "the answer to grow")
        lease = f"gw:{{{chat_id}}}:lease"
        fence = rig.client().hget(lease, "fence")
        worker.kill()
        shown = sim.card(card.card_id or "")
        assert shown is not None and shown.streaming_mode
        if when == "after-its-lease-ran-out":  # the sweeper claims it again: no worker runs it
            wait_until(lambda: rig.client().hget(lease, "fence") not in (fence, None),
                       TEST_LEASE_TTL_S + 20, "the turn claimed again after its lease")
        if by == "command":
            stop = sim.send_text(chat_id, "/stop", sender_open_id=REQUESTER)
        else:
            assert click_stop(sim, chat_id, card, REQUESTER,
                              value=value).toast["type"] == "success"
        view = wait_until(lambda: closed(sim, card), TEST_CANCEL_TIMEOUT_S + 20,
                          "the card closed for the dead worker's turn")
        assert isinstance(view, CardView) and not view.streaming_mode
        if by == "command":
            assert "⏹ Stopped." in view.text
            wait_until(lambda: sim.reactions(stop) == ["DONE"], 20, "the /stop confirmed")
            assert stop not in replies_to(sim, chat_id), "said once: on the card"
        else:
            assert f"⏹ Stopped by <at id={REQUESTER}></at>" in view.text
        assert view.elements["answer"].startswith(shown.elements["answer"]), \
            "the text the card showed, not less"
        assert "w399" not in view.text and "⏳" not in view.text
        wait_until(lambda: "closed the card left live" in rig.fleet.logs("listener"), 10,
                   "the listener's line")
        rig.fleet("worker")  # the chat goes on
        after = sim.send_text(chat_id, "are you there?", sender_open_id=REQUESTER)
        wait_until(lambda: after in replies_to(sim, chat_id), 30, "the next message answered")
        assert [m.message_id for m in sim.sent_messages(chat_id) if m.reply_to == asked] == \
            [card.message_id], "one card, no second answer"

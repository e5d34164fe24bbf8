"""Approval cards end to end: an agent's `turn.approve` on a worker, the card in the chat,
clicks from the requester, an admin, an allowlisted user and strangers on any listener,
expiry, double clicks, /approve and /deny, and /stop while the turn waits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.chats.store import ChatStore
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.simulator.records import SentMessage
from tests.support.replies import agent_events, button, replies_to
from tests.support.rig import (
    MODES,
    TEST_CANCEL_TIMEOUT_S,
    TEST_LEASE_TTL_S,
    Mode,
    Rig,
    rig_up,
)

REQUESTER, ADMIN, ALLOWED, STRANGER = "ou_requester", "ou_admin", "ou_allowed", "ou_stranger"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, FEISHU_ADMINS=ADMIN, FEISHU_ALLOWED_USERS=ALLOWED) as rig:
        yield rig


@pytest.fixture
def webhook_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, mode="webhook", FEISHU_ADMINS=ADMIN,
                FEISHU_ALLOWED_USERS=ALLOWED) as rig:
        yield rig


@pytest.fixture(scope="module")
def open_rig(rig: Rig) -> Rig:
    """The same rig, its listeners replaced by one with neither FEISHU_ADMINS nor
    FEISHU_ALLOWED_USERS (who may decide is the listener's business alone)."""
    for proc in [p for p in rig.fleet.started if p.name.startswith("listener") and p.alive]:
        proc.stop()
    rig.fleet("listener", FEISHU_ADMINS="", FEISHU_ALLOWED_USERS="")
    rig.sim.wait_connected(1, timeout_s=30)
    wait_until(lambda: rig.sim.connection_count == 1, 10, "only the open listener")
    return rig


def ask(sim: Simulator, chat: str, *, timeout_s: float = 60, key: str = "tool",
        who: str = REQUESTER, chat_type: str = "group") -> tuple[str, SentMessage]:
    """A message whose turn asks for approval; returns it and the card the bot sent."""
    message_id = sim.send_text(chat, f"approve {timeout_s:g} {key} May I run the tool?",
                               sender_open_id=who, chat_type=chat_type)
    card = wait_until(lambda: next((m for m in sim.sent_messages(chat)
                                    if m.reply_to == message_id and m.msg_type == "interactive"),
                                   None), 30, "the approval card")
    assert isinstance(card, SentMessage)
    return message_id, card


def click(sim: Simulator, chat: str, card: SentMessage, decision: str, who: str,
          token: str | None = None) -> Any:
    frame = sim.send_card_action(chat, card.message_id, who, button(card, decision),
                                 token=token)
    response = sim.card_response(frame, timeout_s=10)
    assert not response.late, f"answered in {response.latency_ms:.0f} ms, over Feishu's 3 s"
    return response


def decision_reply(sim: Simulator, chat: str, message_id: str) -> str:
    texts = wait_until(lambda: [t for t in replies_to(sim, chat).get(message_id, [])
                                if t.startswith("decision:")], 30, "the turn's answer")
    assert isinstance(texts, list) and len(texts) == 1, texts
    return str(texts[0])


def card_text(sim: Simulator, card: SentMessage) -> str:
    current = sim.get_message(card.message_id)
    assert current is not None
    return str(current.content)


@pytest.mark.parametrize("mode", MODES)
def test_the_requester_allows_once_and_a_second_click_is_told_it_was_decided(
        mode: Mode, request: pytest.FixtureRequest) -> None:
    """In both modes: by webhook the click is a POST, answered with the toast and card."""
    rig: Rig = request.getfixturevalue("rig" if mode == "ws" else "webhook_rig")
    sim, chat = rig.sim, "oc_approve_requester"
    message_id, card = ask(sim, chat)
    store = ChatStore(rig.client())
    fence = store.lease(chat).get("fence")
    time.sleep(2 * TEST_LEASE_TTL_S)  # the wait outlives the lease TTL: not synchronisation
    assert store.lease(chat).get("fence") == fence, "the heartbeat kept the turn's lease"
    assert not [e for e in agent_events(rig.client(), chat) if e["event"] == "end"]
    first = click(sim, chat, card, "once", REQUESTER)
    assert first.toast["type"] == "success"
    assert decision_reply(sim, chat, message_id) == "decision: once"
    assert "Allowed once" in card_text(sim, card) and REQUESTER in card_text(sim, card)
    second = click(sim, chat, card, "deny", REQUESTER)
    assert "Already decided" in second.toast["content"]
    assert "Allowed once" in card_text(sim, card)


def test_a_stranger_is_refused_and_changes_nothing_then_an_admin_decides(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_approve_admin"
    message_id, card = ask(sim, chat)
    refused = click(sim, chat, card, "once", STRANGER)
    assert "may not" in refused.toast["content"] and refused.card is None
    assert "Approval needed" in card_text(sim, card)
    assert "may not decide it; refused" in rig.fleet.logs("listener")
    click(sim, chat, card, "deny", ADMIN)
    assert decision_reply(sim, chat, message_id) == "decision: deny"


def test_an_allowlisted_user_allows_always_and_the_chat_is_not_asked_again(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_approve_allowed"
    message_id, card = ask(sim, chat, key="deploy")
    click(sim, chat, card, "always", ALLOWED)
    assert decision_reply(sim, chat, message_id) == "decision: always"
    again = sim.send_text(chat, "approve 60 deploy May I deploy again?",
                          sender_open_id=REQUESTER, chat_type="group")
    assert decision_reply(sim, chat, again) == "decision: always"
    cards = [m for m in sim.sent_messages(chat) if m.msg_type == "interactive"]
    assert [m.message_id for m in cards] == [card.message_id], "asked once"


def test_an_unanswered_request_expires_and_a_late_click_is_told_so(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_approve_expiry"
    message_id, card = ask(sim, chat, timeout_s=1.5)
    assert decision_reply(sim, chat, message_id) == "decision: expired"
    wait_until(lambda: "expired" in card_text(sim, card), 10, "the card to say expired")
    late = click(sim, chat, card, "once", REQUESTER)
    assert "expired" in late.toast["content"].lower()


def test_text_commands_decide_with_the_same_rule(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_approve_text"
    message_id, card = ask(sim, chat)
    refused = sim.send_text(chat, "/approve", sender_open_id=STRANGER, chat_type="group")
    wait_until(lambda: refused in replies_to(sim, chat), 20, "the refusal")
    assert replies_to(sim, chat)[refused] == ["You may not decide this approval request."]
    approved = sim.send_text(chat, "/approve", sender_open_id=REQUESTER, chat_type="group")
    assert decision_reply(sim, chat, message_id) == "decision: once"
    wait_until(lambda: sim.reactions(approved) == ["DONE"], 20, "the confirmation")
    wait_until(lambda: "Allowed once" in card_text(sim, card), 10, "the card updated")
    assert approved not in replies_to(sim, chat), "said once: on the card"


def test_stop_during_a_pending_approval_ends_the_turn_within_the_cancel_timeout(
        rig: Rig) -> None:
    sim, chat = rig.sim, "oc_approve_stop"
    message_id, card = ask(sim, chat, timeout_s=120)
    clock = time.monotonic()
    stop = sim.send_text(chat, "/stop", sender_open_id=REQUESTER, chat_type="group")
    wait_until(lambda: stop in replies_to(sim, chat), TEST_CANCEL_TIMEOUT_S + 15, "/stop's reply")
    assert time.monotonic() - clock < TEST_CANCEL_TIMEOUT_S + 10
    wait_until(lambda: "stopped" in card_text(sim, card).lower(), 10, "the card to say stopped")
    after = sim.send_text(chat, "next", sender_open_id=REQUESTER, chat_type="group")
    wait_until(lambda: after in replies_to(sim, chat), 20, "the next turn")
    assert replies_to(sim, chat)[after] == ["echo: next"]
    assert "decision:" not in str(replies_to(sim, chat).get(message_id, []))


def test_a_click_on_another_listener_reaches_the_turn_waiting_on_the_worker(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_approve_elsewhere"
    message_id, card = ask(sim, chat)
    first = [p for p in rig.fleet.started if p.name.startswith("listener") and p.alive]
    second = rig.fleet("listener")
    sim.wait_connected(2, timeout_s=30)
    for proc in first:
        proc.stop()
    wait_until(lambda: sim.connection_count == 1, 10, "only the new listener")
    click(sim, chat, card, "session", REQUESTER)
    assert decision_reply(sim, chat, message_id) == "decision: session"
    assert "session by" in second.log()


def test_in_a_dm_with_no_lists_the_dm_user_decides(open_rig: Rig) -> None:
    sim, chat = open_rig.sim, "oc_approve_dm"
    message_id, card = ask(sim, chat, who="ou_dm_user", chat_type="p2p")
    assert "may not" in click(sim, chat, card, "once", STRANGER).toast["content"]
    click(sim, chat, card, "once", "ou_dm_user")
    assert decision_reply(sim, chat, message_id) == "decision: once"


def test_in_a_group_with_no_lists_only_the_requester_decides(open_rig: Rig) -> None:
    sim, chat = open_rig.sim, "oc_approve_group"
    message_id, card = ask(sim, chat)
    for other in (ADMIN, ALLOWED, STRANGER):
        assert "may not" in click(sim, chat, card, "once", other).toast["content"]
    click(sim, chat, card, "deny", REQUESTER)
    assert decision_reply(sim, chat, message_id) == "decision: deny"


@pytest.fixture
def bare_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A gateway of the test's own with a listener and no worker: the test starts (and
    kills) its workers."""
    with rig_up(tmp_path_factory, start="listener", kill=True) as rig:
        yield rig


def approval_cards(sim: Simulator, chat: str, message_id: str) -> list[str]:
    return [m.message_id for m in sim.sent_messages(chat)
            if m.reply_to == message_id and m.msg_type == "interactive"]


def asked(rig: Rig, chat: str) -> int:
    """How many times a worker asked (or asked again) for the chat's approval."""
    return rig.fleet.logs("worker").count(f"asked in chat {chat}")


def answered_once(rig: Rig, chat: str, message_id: str, expected: str) -> None:
    """The turn answered `expected`, once, and ended."""
    assert decision_reply(rig.sim, chat, message_id) == expected
    wait_until(lambda: [e for e in agent_events(rig.client(), chat)
                        if e["event"] == "end" and e["message_id"] == message_id], 20,
               "the turn to end")
    texts = replies_to(rig.sim, chat)[message_id]
    assert [t for t in texts if t.startswith("decision:")] == [expected]


def test_a_turn_run_again_after_its_worker_died_waits_on_the_same_card(
        bare_rig: Rig) -> None:
    rig, chat = bare_rig, "oc_approve_rerun"
    sim = rig.sim
    worker = rig.fleet("worker", supervise=True)
    message_id, card = ask(sim, chat)
    wait_until(lambda: asked(rig, chat) == 1, 10, "the first run to wait")
    worker.kill()  # the fleet starts it again; the sweeper runs the turn again
    wait_until(lambda: asked(rig, chat) == 2, TEST_LEASE_TTL_S + 60, "the run again to wait")
    assert approval_cards(sim, chat, message_id) == [card.message_id], "one card"
    assert "Approval needed" in card_text(sim, card)
    first = click(sim, chat, card, "once", REQUESTER)
    assert first.toast["type"] == "success"
    answered_once(rig, chat, message_id, "decision: once")
    assert approval_cards(sim, chat, message_id) == [card.message_id]
    assert "Allowed once" in card_text(sim, card)


def test_a_click_while_no_worker_is_alive_is_honoured_by_the_run_again(
        bare_rig: Rig) -> None:
    rig, chat = bare_rig, "oc_approve_rerun_dead"
    sim = rig.sim
    worker = rig.fleet("worker")
    message_id, card = ask(sim, chat)
    wait_until(lambda: asked(rig, chat) == 1, 10, "the first run to wait")
    worker.kill()
    assert not rig.fleet.workers()
    answer = click(sim, chat, card, "deny", REQUESTER)
    assert answer.toast["type"] == "success"
    rig.fleet("worker")
    answered_once(rig, chat, message_id, "decision: deny")
    assert approval_cards(sim, chat, message_id) == [card.message_id], "no second card"
    assert "Denied" in card_text(sim, card)
    assert asked(rig, chat) == 1, "the run again found it decided and went on at once"

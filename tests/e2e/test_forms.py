"""Forms end to end (`turn.ask`): an agent on a worker asks, the card in the chat, submits
by the requester, an admin, a stranger; a submit checked against the fields (a required one
missing, a value not among the options, one too long: a toast, the card as it was, nothing
reaches the agent); expiry and a late submit; a forged or replayed submit; /stop while the
turn waits; a worker killed while waiting, and a submit made while no worker runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.simulator.records import SentMessage
from tests.support.replies import agent_events, command_answer, replies_to
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, TEST_LEASE_TTL_S, Rig, rig_up

REQUESTER, ADMIN, STRANGER = "ou_form_requester", "ou_form_admin", "ou_form_stranger"
GOOD = {"name": "Ann", "level": "high", "tags": ["b", "a"], "due": "2026-12-24 +0800",
        "notify": True}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, FEISHU_ADMINS=ADMIN) as rig:
        yield rig


def ask(sim: Simulator, chat: str, *, timeout_s: float = 60, who: str = REQUESTER,
        chat_type: str = "group") -> tuple[str, SentMessage]:
    """A message whose turn asks the test form; it and the form's card."""
    message_id = sim.send_text(chat, f"form {timeout_s:g}", sender_open_id=who,
                               chat_type=chat_type)
    card = wait_until(lambda: next((m for m in sim.sent_messages(chat)
                                    if m.reply_to == message_id and m.msg_type == "interactive"),
                                   None), 30, "the form's card")
    assert isinstance(card, SentMessage)
    return message_id, card


def submit_value(card: SentMessage) -> dict[str, Any]:
    form = next(e for e in card.content["body"]["elements"] if e["tag"] == "form")
    button = next(e for e in form["elements"] if e.get("form_action_type") == "submit")
    return dict(button["behaviors"][0]["value"])


def submit(sim: Simulator, chat: str, card: SentMessage, values: dict[str, Any], who: str,
           *, value: dict[str, Any] | None = None, token: str | None = None) -> Any:
    frame = sim.send_card_action(chat, card.message_id, who, value or submit_value(card),
                                 form_value=values, token=token)
    response = sim.card_response(frame, timeout_s=10)
    assert not response.late, f"answered in {response.latency_ms:.0f} ms, over Feishu's 3 s"
    return response


def form_reply(sim: Simulator, chat: str, message_id: str, timeout_s: float = 30) -> str:
    texts = wait_until(lambda: [t for t in replies_to(sim, chat).get(message_id, [])
                                if t.startswith("form:")], timeout_s, "the turn's answer")
    assert isinstance(texts, list) and len(texts) == 1, texts
    return str(texts[0])


def card_text(sim: Simulator, card: SentMessage) -> str:
    now = sim.get_message(card.message_id)
    return json.dumps(now.content if now is not None else {}, ensure_ascii=False)


def test_the_requester_fills_the_form_in_and_the_agent_gets_the_checked_values(
        rig: Rig) -> None:
    sim, chat = rig.sim, "oc_form_filled"
    message_id, card = ask(sim, chat)
    assert {"input", "select_static", "multi_select_static", "date_picker", "checker"} <= {
        e["tag"] for e in card.content["body"]["elements"][0]["elements"]}
    answer = submit(sim, chat, card, {**GOOD, "extra": "dropped"}, REQUESTER)
    assert answer.toast["type"] == "success"
    assert form_reply(sim, chat, message_id) == (
        'form: submitted {"due": "2026-12-24", "level": "high", "name": "Ann", "notify": true,'
        f' "tags": ["b", "a"]}} by {REQUESTER}')
    assert "Submitted" in card_text(sim, card) and "Ann" in card_text(sim, card)
    again = submit(sim, chat, card, GOOD, REQUESTER)
    assert again.toast["content"] == "Already submitted."


@pytest.mark.parametrize(("values", "toast"), [
    ({**GOOD, "name": ""}, "Please fill in: Your name"),
    ({k: v for k, v in GOOD.items() if k != "level"}, "Please fill in: Level"),
    ({**GOOD, "level": "urgent"}, "Choose among the options for: Level"),
    ({**GOOD, "tags": ["a", "z"]}, "Choose among the options for: Tags"),
    ({**GOOD, "name": "x" * 41}, "Too long (at most 40 characters): Your name"),
    ({**GOOD, "due": "tomorrow"}, "Not a date: Due"),
    ({**GOOD, "name": "y" * 20_000}, "That is too much text for this form."),
])
def test_a_submit_that_does_not_fit_the_fields_is_refused_with_a_toast(
        rig: Rig, values: dict[str, Any], toast: str) -> None:
    sim, chat = rig.sim, f"oc_form_refused_{abs(hash(toast)) % 10_000}"
    message_id, card = ask(sim, chat)
    refused = submit(sim, chat, card, values, REQUESTER)
    assert (refused.toast["type"], refused.toast["content"]) == ("error", toast)
    assert refused.card is None, "the card stays as it was"
    assert not [t for t in replies_to(sim, chat).get(message_id, []) if t.startswith("form:")], \
        "nothing reached the agent"
    assert submit(sim, chat, card, GOOD, REQUESTER).toast["type"] == "success"
    assert form_reply(sim, chat, message_id).startswith("form: submitted")


def test_a_stranger_may_not_submit_an_admin_may(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_form_who"
    message_id, card = ask(sim, chat)
    refused = submit(sim, chat, card, GOOD, STRANGER)
    assert refused.toast["content"] == "You may not submit this form."
    assert submit(sim, chat, card, {**GOOD, "name": "Adm"}, ADMIN).toast["type"] == "success"
    assert form_reply(sim, chat, message_id).endswith(f"by {ADMIN}")


def test_a_forged_or_replayed_submit_changes_nothing(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_form_forged"
    message_id, card = ask(sim, chat)
    forged = submit(sim, chat, card, GOOD, REQUESTER,
                    value={**submit_value(card), "form_request": "f" * 20})
    assert forged.toast["content"] == "This form is unknown or too old."
    elsewhere = submit(sim, chat, card, GOOD, REQUESTER,
                       value={**submit_value(card), "chat_id": "oc_elsewhere"})
    assert elsewhere.toast["content"] == "This form is unknown or too old."
    first = submit(sim, chat, card, GOOD, REQUESTER, token="tok-form-1")
    replayed = submit(sim, chat, card, {**GOOD, "name": "Mallory"}, REQUESTER,
                      token="tok-form-1")
    assert first.toast["type"] == "success" and replayed.toast["content"] == "Already submitted."
    assert '"name": "Ann"' in form_reply(sim, chat, message_id)


def test_an_unfilled_form_expires_and_a_late_submit_is_told_so(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_form_expired"
    message_id, card = ask(sim, chat, timeout_s=1.5)
    assert form_reply(sim, chat, message_id) == "form: expired {} by -"
    wait_until(lambda: "Form expired" in card_text(sim, card), 20, "the card to say expired")
    late = submit(sim, chat, card, GOOD, REQUESTER)
    assert late.toast["content"] == "This form has expired."


def test_stop_while_the_form_waits_ends_the_turn_and_the_card_says_so(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_form_stopped"
    message_id, card = ask(sim, chat)
    stop = sim.send_text(chat, "/stop", sender_open_id=REQUESTER, chat_type="group")
    command_answer(sim, chat, stop, TEST_CANCEL_TIMEOUT_S + 20)
    wait_until(lambda: "Form stopped" in card_text(sim, card), 20, "the card to say stopped")
    assert submit(sim, chat, card, GOOD, REQUESTER).toast["content"].startswith(
        "This form was withdrawn")
    assert not [t for t in replies_to(sim, chat).get(message_id, []) if "submitted" in t]


@pytest.fixture
def bare_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, start="listener", kill=True) as rig:
        yield rig


def asked(rig: Rig, chat: str) -> int:
    return rig.fleet.logs("worker").count(f"asked in chat {chat}")


def test_a_submit_while_no_worker_runs_is_honoured_on_the_same_card(bare_rig: Rig) -> None:
    rig, chat = bare_rig, "oc_form_rerun"
    sim = rig.sim
    worker = rig.fleet("worker")
    message_id, card = ask(sim, chat, chat_type="p2p")
    wait_until(lambda: asked(rig, chat) == 1, 10, "the first run to wait")
    worker.kill()
    assert not rig.fleet.workers()
    assert submit(sim, chat, card, GOOD, REQUESTER).toast["type"] == "success"
    rig.fleet("worker")
    assert form_reply(sim, chat, message_id, TEST_LEASE_TTL_S + 60).startswith(
        "form: submitted")
    cards = [m.message_id for m in sim.sent_messages(chat)
             if m.reply_to == message_id and m.msg_type == "interactive"]
    assert cards == [card.message_id], "one card"
    wait_until(lambda: [e for e in agent_events(rig.client(), chat)
                        if e["event"] == "end" and e["message_id"] == message_id], 20, "the end")
    assert len([t for t in replies_to(sim, chat)[message_id] if t.startswith("form:")]) == 1

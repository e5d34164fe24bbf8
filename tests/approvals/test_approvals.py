"""Approvals without a turn: who may decide (every case), and the request's life in a real
Redis — clicks, tokens, expiry, binding to the chat, remembered decisions, /approve."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from gateway.approvals.approval_book import ApprovalBook, Opened
from gateway.approvals.asking import request_id_of
from gateway.approvals.card import pending_card
from gateway.approvals.policy import DECISIONS, may_decide
from gateway.approvals.verdicts import Verdicts
from gateway.core.model import Message
from gateway.ops.embedded_redis import EmbeddedRedis
from tests.support.rig import client_of

REQUESTER, DM_USER, ADMIN, ALLOWED, STRANGER = "ou_req", "ou_dm", "ou_admin", "ou_ok", "ou_x"


def expected(clicker: str, chat_type: str, admins: bool, allowed: bool) -> bool:
    """The rule as docs/replies-and-access.md states it, written out case by case."""
    if clicker == REQUESTER:
        return True
    if clicker == ADMIN and admins:
        return True
    if clicker == ALLOWED and allowed:
        return True
    return chat_type == "p2p" and clicker == DM_USER


@pytest.mark.parametrize(("clicker", "chat_type", "admins", "allowed"), list(itertools.product(
    [REQUESTER, DM_USER, ADMIN, ALLOWED, STRANGER, ""], ["p2p", "group"], [False, True],
    [False, True])))
def test_who_may_decide(clicker: str, chat_type: str, admins: bool, allowed: bool) -> None:
    got = may_decide(clicker, requester=REQUESTER, chat_type=chat_type, dm_user=DM_USER,
                     admins=frozenset({ADMIN}) if admins else frozenset(),
                     allowed=frozenset({ALLOWED}) if allowed else frozenset())
    assert got == expected(clicker, chat_type, admins, allowed)


def test_group_lists_never_lock_the_dm_user_out_and_strangers_never_get_in() -> None:
    lists = {"admins": frozenset({ADMIN}), "allowed": frozenset({ALLOWED})}
    assert may_decide(DM_USER, requester=DM_USER, chat_type="p2p", dm_user=DM_USER, **lists)
    assert not may_decide(STRANGER, requester=REQUESTER, chat_type="group", dm_user="",
                          **lists)
    assert not may_decide(DM_USER, requester=REQUESTER, chat_type="group", dm_user=DM_USER,
                          admins=frozenset(), allowed=frozenset())


def test_every_button_carries_its_request_and_decision() -> None:
    card = pending_card("r1", "run rm -rf /tmp/x?", "oc_1")
    buttons = [a for e in card["elements"] if e["tag"] == "action" for a in e["actions"]]
    assert [b["value"] for b in buttons] == [
        {"request_id": "r1", "decision": d, "chat_id": "oc_1"} for d in DECISIONS]


@pytest.fixture
def client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


def message(chat: str, chat_type: str = "group", sender: str = REQUESTER) -> Message:
    return Message(f"om_{uuid.uuid4().hex[:8]}", chat, chat_type, sender, "text", "do it")


def remembered(opened: Opened) -> str:
    """The remembered decision that answered an ask ("" when none did)."""
    return opened.state if opened.kind == "remembered" else ""


def click(chat: str, request_id: str, decision: str, who: str,
          token: str | None = None) -> dict[str, Any]:
    return {"schema": "2.0", "header": {"event_type": "card.action.trigger"}, "event": {
        "operator": {"open_id": who}, "token": token or uuid.uuid4().hex,
        "action": {"tag": "button", "value": {"request_id": request_id, "decision": decision,
                                              "chat_id": chat}},
        "context": {"open_chat_id": chat, "open_message_id": "om_card"}}}


def test_a_click_decides_once_and_a_second_is_told_it_was_decided(
        client: redis.Redis) -> None:
    book = ApprovalBook(client)
    verdicts = Verdicts(book)
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    assert book.open(message(chat), "r1", "k", "do it?", 60_000).kind == "asked"
    refused = verdicts.on_click("", click(chat, "r1", "once", STRANGER))
    assert refused is not None and "card" not in refused and book.state(chat, "r1") == "pending"
    first = verdicts.on_click("", click(chat, "r1", "once", REQUESTER, token="t1"))
    assert first is not None and first["toast"]["type"] == "success"
    assert "Allowed once" in str(first["card"]["data"])
    assert book.state(chat, "r1") == "once" and book.pending(chat) is None
    again = verdicts.on_click("", click(chat, "r1", "deny", REQUESTER, token="t1"))
    assert again is not None and "Already decided" in again["toast"]["content"]
    other = verdicts.on_click("", click(chat, "r1", "deny", REQUESTER))
    assert other is not None and "Already decided" in other["toast"]["content"]
    assert book.state(chat, "r1") == "once"


def test_a_click_is_bound_to_its_chat_and_expires(client: redis.Redis) -> None:
    book = ApprovalBook(client)
    verdicts = Verdicts(book)
    chat, elsewhere = f"oc_{uuid.uuid4().hex[:8]}", f"oc_{uuid.uuid4().hex[:8]}"
    book.open(message(chat), "r2", "k", "p", 300)
    forged = click(chat, "r2", "once", REQUESTER)
    forged["event"]["context"]["open_chat_id"] = elsewhere
    answer = verdicts.on_click("", forged)
    assert answer is not None and "unknown" in answer["toast"]["content"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and book.redis.pttl(book.keyspace.chat(chat).asking) > 0:
        time.sleep(0.05)
    late = verdicts.on_click("", click(chat, "r2", "once", REQUESTER))
    assert late is not None and "expired" in late["toast"]["content"]
    assert book.state(chat, "r2") == "expired"
    assert verdicts.on_click("", {"event": {"action": {"value": {"x": 1}}}}) is None


def test_a_forged_click_is_one_printable_line(client: redis.Redis,
                                             caplog: pytest.LogCaptureFixture) -> None:
    verdicts = Verdicts(ApprovalBook(client))
    forged = click("oc_x\nINFO approval r1 in chat oc_x: once by ou_admin (card)",
                   "r\udfff", "once", "ou_\u202e")
    with caplog.at_level(logging.INFO, logger="gateway"):
        answer = verdicts.on_click("", forged)
    assert answer is not None and "unknown" in answer["toast"]["content"]
    [line] = [r.getMessage() for r in caplog.records if r.name.startswith("gateway")]
    assert "\n" not in line and line.isprintable(), line
    assert line.startswith("card click by ou_\\u202e on unknown approval r\ufffd (chat oc_x\\n")


def test_session_and_always_are_remembered_and_new_sessions_ask_again(
        client: redis.Redis) -> None:
    book = ApprovalBook(client)
    verdicts = Verdicts(book)
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    book.open(message(chat), "s1", "shell", "p", 60_000)
    verdicts.on_click("", click(chat, "s1", "session", REQUESTER))
    assert remembered(book.open(message(chat), "s2", "shell", "p", 60_000)) == "session"
    client.set(book.keyspace.chat(chat).generation, "99")  # /new
    assert book.open(message(chat), "s3", "shell", "p", 60_000).kind == "asked"
    verdicts.on_click("", click(chat, "s3", "always", REQUESTER))
    client.set(book.keyspace.chat(chat).generation, "100")
    assert remembered(book.open(message(chat), "s4", "shell", "p", 60_000)) == "always"
    assert book.open(message(chat), "s5", "other", "p", 60_000).kind == "asked"
    assert client.ttl(book.keyspace.chat(chat).allow) > 0
    assert client.ttl(book.keyspace.chat(chat).ask("s5")) > 0


def test_text_commands_decide_the_pending_request_with_the_same_rule(
        client: redis.Redis) -> None:
    book = ApprovalBook(client)
    verdicts = Verdicts(book, admins=frozenset({ADMIN}))
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    assert "no pending" in verdicts.by_text(message(chat), "once")
    book.open(message(chat), "t1", "k", "p", 60_000)
    assert "may not" in verdicts.by_text(message(chat, sender=STRANGER), "deny")
    assert verdicts.by_text(message(chat, sender=ADMIN), "deny") == "", "the card says it"
    assert book.get(chat, "t1") is not None and book.get(chat, "t1").by == ADMIN  # type: ignore[union-attr]
    assert "no pending" in verdicts.by_text(message(chat), "once")


def test_in_a_dm_with_no_lists_the_dm_user_decides(client: redis.Redis) -> None:
    book = ApprovalBook(client)
    verdicts = Verdicts(book, admins=frozenset({ADMIN}))
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    book.open(message(chat, "p2p", sender=DM_USER), "d1", "k", "p", 60_000)
    refused = verdicts.on_click("", click(chat, "d1", "once", STRANGER))
    assert refused is not None and "may not" in refused["toast"]["content"]
    answer = verdicts.on_click("", click(chat, "d1", "always", DM_USER))
    assert answer is not None and answer["toast"]["type"] == "success"


def test_a_turn_asks_the_same_request_on_every_run() -> None:
    ids = {request_id_of("oc_1", "om_1", n, "k\nq?") for n in range(3)}
    assert len(ids) == 3 and request_id_of("oc_1", "om_1", 0, "k\nq?") in ids
    assert request_id_of("oc_1", "om_2", 0, "k\nq?") not in ids
    assert request_id_of("oc_2", "om_1", 0, "k\nq?") not in ids
    assert request_id_of("oc_1", "om_1", 0, "k\nanother?") not in ids, \
        "another question is another request: a card decides only what it shows"
    assert request_id_of("oc_1", "om_1#retry1", 0, "k\nq?") not in ids


def test_asking_again_finds_the_request_its_card_and_its_decision(
        client: redis.Redis) -> None:
    book = ApprovalBook(client)
    verdicts = Verdicts(book)
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    asked = message(chat)
    first = book.open(asked, "g1", "k", "do it?", 60_000)
    assert (first.kind, first.state, first.left_ms, first.card) == ("asked", "pending",
                                                                     60_000, "")
    book.set_card(chat, "g1", "om_card_1")
    again = book.open(asked, "g1", "k", "do it?", 600_000)
    assert (again.kind, again.state, again.card) == ("again", "pending", "om_card_1")
    assert 0 < again.left_ms <= 60_000, "the timeout counts from the first ask"
    pending = book.pending(chat)
    assert pending is not None and pending.request_id == "g1"
    verdicts.on_click("", click(chat, "g1", "deny", REQUESTER))
    decided = book.open(asked, "g1", "k", "do it?", 60_000)
    assert (decided.kind, decided.state, decided.by, decided.via, decided.card) == (
        "again", "deny", REQUESTER, "card", "om_card_1")
    assert book.pending(chat) is None
    assert client.ttl(book.keyspace.chat(chat).ask("g1")) > 0


def test_asking_another_question_under_the_same_id_asks_it_anew_on_the_same_card(
        client: redis.Redis) -> None:
    book = ApprovalBook(client)
    verdicts = Verdicts(book)
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    asked = message(chat)
    book.open(asked, "q1", "k", "delete build/?", 60_000)
    book.set_card(chat, "q1", "om_card_q")
    verdicts.on_click("", click(chat, "q1", "once", REQUESTER))
    other = book.open(asked, "q1", "k", "delete everything?", 60_000)
    assert (other.kind, other.state, other.card) == ("reopened", "pending", "om_card_q")
    request = book.get(chat, "q1")
    assert request is not None and (request.state, request.by, request.via) == (
        "pending", "", "")
    assert request.prompt == "delete everything?"


def test_a_request_asked_again_after_its_timeout_has_no_time_left(
        client: redis.Redis) -> None:
    book = ApprovalBook(client)
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    asked = message(chat)
    book.open(asked, "e1", "k", "p", 200)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and book.redis.pttl(book.keyspace.chat(chat).asking) > 0:
        time.sleep(0.05)
    again = book.open(asked, "e1", "k", "p", 60_000)
    assert (again.kind, again.state) == ("again", "pending") and again.left_ms <= 0
    assert book.pending(chat) is None
    assert book.settle(chat, "e1", "expired")[0] == "expired"
    assert book.open(asked, "e1", "k", "p", 60_000).state == "expired"

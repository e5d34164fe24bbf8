"""The index of recently active chats that catch-up reads: written by the ingest script
itself (no round trip more), bounded, read newest first per app; and a command read back
after an outage is never run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis

from gateway.chats.active import ActiveChats, parse_member
from gateway.chats.keys import CONTROL_KEY, active_key
from gateway.ops.embedded_redis import EmbeddedRedis
from tests.support.rig import client_of
from tests.support.store import msg, started, store_for


@pytest.fixture
def client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


def test_ingest_marks_each_chat_active_once_bounded_and_per_app(client: redis.Redis) -> None:
    client.delete(active_key(None, "cli_a"), active_key(None, "cli_b"))
    store = store_for(client, active_cap=3, inbox_cap=50)
    for n in range(80):
        store.inbox.ingest(msg(f"oc_{n}", n), app_id="cli_a")
    store.inbox.ingest(replace(msg("oc_g", 100), chat_type="group"), app_id="cli_b")
    store.inbox.ingest(msg("oc_79", 79), app_id="cli_a")  # a duplicate: no new mark
    assert client.zcard(active_key(None, "cli_a")) <= 3 + 64, "trimmed in batches past the cap"
    reader = ActiveChats(client)
    recent = reader.recent("cli_a", 0, 3)
    assert [c.chat_id for c in recent] == ["oc_79", "oc_78", "oc_77"]
    assert {c.chat_type for c in recent} == {"p2p"}
    [group] = reader.recent("cli_b", 0, 10)
    assert (group.chat_id, group.chat_type, group.app_id) == ("oc_g", "group", "cli_b")
    newest = recent[0].at_ms
    assert reader.recent("cli_a", newest + 1, 10) == []
    assert client.zscore(active_key(None, "cli_a"), "cli_a|p2p|oc_0") is None, \
        "forgotten on the way"


def test_a_busy_app_never_pushes_a_quiet_apps_chats_out(client: redis.Redis) -> None:
    client.delete(active_key(None, "cli_a"), active_key(None, "cli_b"))
    store = store_for(client, active_cap=3, inbox_cap=50)
    store.inbox.ingest(msg("oc_b_only", 1), app_id="cli_b")
    for n in range(80):
        store.inbox.ingest(msg(f"oc_a{n}", n + 10), app_id="cli_a")
    assert [c.chat_id for c in ActiveChats(client).recent("cli_b", 0, 3)] == ["oc_b_only"]


def test_no_index_without_catch_up(client: redis.Redis) -> None:
    client.delete(active_key(None, "cli_a"), active_key(None, "cli_b"))
    store_for(client).inbox.ingest(msg("oc_quiet", 1), app_id="cli_a")
    assert client.exists(active_key(None, "cli_a")) == 0


def test_a_member_is_parsed_from_the_right() -> None:
    chat = parse_member("cli|odd|group|oc_1", 5.0)
    assert chat is not None and (chat.app_id, chat.chat_type, chat.chat_id) == (
        "cli|odd", "group", "oc_1")
    assert parse_member("oc_1", 1.0) is None and parse_member("a|channel|oc", 1.0) is None


def test_a_command_read_back_after_an_outage_is_late_not_run(client: redis.Redis) -> None:
    store = store_for(client, active_cap=10)
    first = store.inbox.ingest(replace(msg("oc_cmd", 1), caught_up=True), app_id="cli_a")
    assert first.outcome == "claimed", "a caught-up message is admitted as any other"
    stop = store.inbox.ingest(replace(msg("oc_cmd", 2, text="/stop"), caught_up=True), "stop",
                        app_id="cli_a")
    assert stop.outcome == "late"
    live = store.inbox.ingest(msg("oc_cmd", 3, text="/stop"), "stop", app_id="cli_a")
    assert live.outcome == "command", "a pushed command runs as ever"
    entries: list[tuple[str, dict[str, str]]] = client.xrange(CONTROL_KEY)  # type: ignore[assignment]
    kinds = [fields["kind"] for _, fields in entries if fields.get("chat") == "oc_cmd"]
    assert kinds == ["late", "command"]
    [(_, stored)] = store.pending("oc_cmd")
    assert stored is not None and stored.caught_up


def test_an_edit_of_a_message_read_back_keeps_its_late_mark(client: redis.Redis) -> None:
    store = store_for(client, active_cap=10)
    store.inbox.ingest(replace(msg("oc_edit", 1), caught_up=True), app_id="cli_a")
    store.inbox.ingest(replace(msg("oc_edit", 2), caught_up=True), app_id="cli_a")  # it waits
    assert store.changes.revise(msg("oc_edit", 2, text="edited"), 10**13) == "revised"
    # an edit that came before its message, read back later
    assert store.changes.revise(msg("oc_edit", 3, text="edited first"), 10**13) == "kept"
    store.inbox.ingest(replace(msg("oc_edit", 3), caught_up=True), app_id="cli_a")
    found = [(s.text, s.caught_up) for _, s in store.pending("oc_edit") if s is not None]
    assert found[1:] == [("edited", True), ("edited first", True)]


def test_a_message_read_back_never_interrupts_the_turn_answering_earlier_ones(
        client: redis.Redis) -> None:
    store = store_for(client, active_cap=10, merge_window_ms=0)
    client.delete(CONTROL_KEY)
    turn = store.inbox.ingest(replace(msg("oc_late_int", 1), caught_up=True), app_id="cli_a",
                        busy="interrupt").claimed
    assert turn is not None and started(store, turn).message_id == "om_1"
    store.inbox.ingest(replace(msg("oc_late_int", 2), caught_up=True), app_id="cli_a",
                 busy="interrupt")
    store.inbox.ingest(msg("oc_late_int", 3), app_id="cli_a", busy="interrupt")  # pushed: it does
    entries: list[tuple[str, dict[str, str]]] = client.xrange(CONTROL_KEY)  # type: ignore[assignment]
    interrupts = [f["message"] for _, f in entries if f.get("kind") == "interrupt"]
    assert len(interrupts) == 1 and '"om_3"' in interrupts[0]

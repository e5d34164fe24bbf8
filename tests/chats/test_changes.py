"""Withdrawn and edited messages, and the bot removed from a chat: the scripts against a real
redis-server (lua/withdraw.lua, revise.lua, evict.lua)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import redis

from gateway.chats.history import read_history
from gateway.chats.keys import CONTROL_KEY, KEYSPACE_KEY, MARKS_SINCE_KEY, ChatKeys
from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, TurnRef
from gateway.ops.embedded_redis import EmbeddedRedis
from tests.support.rig import client_of
from tests.support.store import first_turn, lease_gone, msg, pending_ids, store_for


@pytest.fixture
def redis_client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


def outcomes(store: ChatStore, chat_id: str) -> list[tuple[str, str]]:
    return [(r.message_id, r.outcome) for r in read_history(store.redis, store.keys(chat_id))]


def stopping_jobs(client: redis.Redis, chat_id: str) -> list[dict[str, str]]:
    entries: list[tuple[str, dict[str, str]]] = client.xrange(CONTROL_KEY)  # type: ignore[assignment]
    return [fields for _, fields in entries
            if fields.get("kind") == "stopping" and fields.get("chat") == chat_id]


def test_a_withdrawn_waiting_message_is_dropped_and_the_chat_goes_on(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, messages=3)
    assert store.changes.withdraw(chat_id, "om_2").how == "dropped"
    assert store.changes.withdraw(chat_id, "om_2").how == "unknown", "a redelivered recall: no-op"
    assert pending_ids(store, chat_id) == ["om_1", "om_3"]
    assert store.turns.start(turn, "t1", "w") is not None
    following = store.turns.complete(turn, outcome="replied").following
    assert following is not None and following.message_id == "om_3"
    assert outcomes(store, chat_id) == [("om_1", "replied"), ("om_2", "withdrawn")]
    assert not read_history(redis_client, store.keys(chat_id))[1].entry, "not retryable"


def test_a_withdrawn_head_not_started_is_dropped_and_the_next_claimed(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, messages=2)
    change = store.changes.withdraw(chat_id, "om_1")
    assert change.how == "claimed" and change.following is not None
    assert change.following.message_id == "om_2" and change.following.fence > turn.fence
    assert store.turns.start(turn, "old", "w") is None, "the published turn is stale"
    started = store.turns.start(change.following, "t2", "w")
    assert started is not None and started.message_id == "om_2"
    lone = f"{chat_id}_lone"
    alone = first_turn(store, lone)
    assert store.changes.withdraw(lone, "om_1").how == "idle"
    assert store.turns.start(alone, "t", "w") is None and store.lease(lone) == {}


def test_a_withdrawn_running_turn_is_flagged_once_and_recorded_as_withdrawn(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, messages=2)
    assert store.turns.start(turn, "t1", "w") is not None
    assert store.changes.withdraw(chat_id, "om_1").how == "stopping"
    assert store.changes.withdraw(chat_id, "om_1").how == "stopping"
    [job] = stopping_jobs(redis_client, chat_id)
    assert (job["fence"], job["task"], job["why"]) == (str(turn.fence), "t1", "withdrawn")
    assert store.turns.heartbeat([turn]) == ["stopped"]
    assert not store.turns.keep_answer(turn, Answer("reply", ("too late",))), \
        "a withdrawn turn is mute"
    following = store.turns.complete(turn, outcome="stopped").following
    assert following is not None and following.message_id == "om_2"
    assert outcomes(store, chat_id) == [("om_1", "withdrawn")]


def test_a_withdrawn_running_turn_whose_worker_died_is_never_run_again(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, running_ttl_ms=200, stop_hold_ms=400)
    turn = first_turn(store, chat_id, messages=2)
    assert store.turns.start(turn, "t1", "w") is not None
    assert store.changes.withdraw(chat_id, "om_1").how == "stopping"
    lease_gone(store, chat_id)  # its worker was killed: nobody completes it
    found = store.recovery.recover(chat_id)
    assert found is not None and found[1].message_id == "om_2"
    assert pending_ids(store, chat_id) == ["om_2"]
    assert outcomes(store, chat_id) == [("om_1", "withdrawn")]


def test_a_message_recalled_before_it_arrives_is_never_admitted(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    assert store.changes.withdraw(chat_id, "om_1").how == "unknown"
    assert store.inbox.ingest(msg(chat_id, 1)).outcome == "withdrawn"
    assert store.inbox.ingest(msg(chat_id, 1)).outcome == "withdrawn", "redelivered: still not"
    assert store.pending(chat_id) == [] and store.lease(chat_id) == {}
    assert store.inbox.ingest(msg(chat_id, 2)).outcome == "claimed"


def text_it_runs(store: ChatStore, turn: TurnRef | None) -> str:
    """Start `turn`: the text of the message it runs."""
    assert turn is not None
    started = store.turns.start(turn, "t1", "w")
    assert started is not None and started.message is not None
    return started.message.text


def redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_message_with_its_create_time_recalled_before_it_arrives_is_never_admitted(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    created = redis_ms(redis_client) - 60_000
    store.changes.withdraw(chat_id, "om_1")
    assert store.inbox.ingest(msg(chat_id, 1, create_ms=created)).outcome == "withdrawn"
    assert store.pending(chat_id) == []


def test_marks_of_the_layout_before_marks_by_day_still_hold(
        redis_client: redis.Redis, upgraded: ChatStore, chat_id: str) -> None:
    """An earlier version kept one key per message: a redelivery of a message it admitted, or
    one it saw recalled, is still refused."""
    k = ChatKeys(chat_id)
    redis_client.set(k.seen("om_1"), "1", ex=3600)
    redis_client.set(k.seen("om_2"), "withdrawn", ex=3600)
    store = upgraded
    assert int(redis_client.get(MARKS_SINCE_KEY) or 0) > 0
    created = redis_ms(redis_client) - 60_000
    assert store.inbox.ingest(msg(chat_id, 1, create_ms=created)).outcome == "duplicate"
    assert store.inbox.ingest(msg(chat_id, 2, create_ms=created)).outcome == "withdrawn"
    assert store.inbox.ingest(msg(chat_id, 2, create_ms=created)).outcome == "withdrawn"
    assert store.inbox.ingest(msg(chat_id, 3, create_ms=created)).outcome == "claimed"


def test_a_message_of_an_earlier_day_is_remembered_for_the_dedupe_ttl_after_it_came(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    created = redis_ms(redis_client) - 3 * 86_400_000
    store.inbox.ingest(msg(chat_id, 1, create_ms=created))
    marks = ChatKeys(chat_id).marks(created // 86_400_000, "om_1")
    assert redis_client.ttl(marks) > store.config.dedupe_ttl_s - 60
    assert store.inbox.ingest(msg(chat_id, 1, create_ms=created)).outcome == "duplicate"


def test_an_edited_waiting_message_keeps_its_place_with_the_new_text(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, messages=3)
    assert store.changes.revise(msg(chat_id, 2, text="edited"), 2000) == "revised"
    assert store.changes.revise(msg(chat_id, 2, text="older edit"), 1000) == "older"
    assert store.changes.revise(msg(chat_id, 2, text="edited"), 2000) == "older", "redelivered"
    assert pending_ids(store, chat_id) == ["om_1", "om_2", "om_3"]
    assert store.turns.start(turn, "t1", "w") is not None
    following = store.turns.complete(turn).following
    assert following is not None
    started = store.turns.start(following, "t2", "w")
    assert started is not None and started.message is not None
    assert started.message.text == "edited"


def test_an_edited_head_not_started_runs_edited_a_started_one_stays(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id)
    assert store.changes.revise(msg(chat_id, 1, text="first edit"), 1000) == "revised"
    started = store.turns.start(turn, "t1", "w")
    assert started is not None and started.message is not None
    assert started.message.text == "first edit"
    assert store.changes.revise(msg(chat_id, 1, text="while it runs"), 2000) == "started"
    store.turns.complete(turn, outcome="replied")
    assert store.changes.revise(msg(chat_id, 1, text="after its answer"), 3000) == "answered"
    assert store.pending(chat_id) == []


def test_an_edit_arriving_before_its_message_is_kept_for_it(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    assert store.changes.revise(msg(chat_id, 1, text="edited first"), 2000) == "kept"
    turn = store.inbox.ingest(msg(chat_id, 1, text="original")).claimed
    assert text_it_runs(store, turn) == "edited first"
    assert store.inbox.ingest(msg(chat_id, 1, text="original")).outcome == "duplicate"


def test_of_two_edits_before_their_message_the_newer_is_admitted(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    assert store.changes.revise(msg(chat_id, 1, text="second edit"), 3000) == "kept"
    assert store.changes.revise(msg(chat_id, 1, text="first edit"), 2000) == "older"
    assert store.changes.revise(msg(chat_id, 1, text="third edit"), 4000) == "kept"
    turn = store.inbox.ingest(msg(chat_id, 1, text="original")).claimed
    assert text_it_runs(store, turn) == "third edit"


def test_a_message_edited_then_recalled_before_it_arrives_is_never_admitted(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    assert store.changes.revise(msg(chat_id, 1, text="edited"), 2000) == "kept"
    store.changes.withdraw(chat_id, "om_1")
    assert store.inbox.ingest(msg(chat_id, 1, text="original")).outcome == "withdrawn"
    assert pending_ids(store, chat_id) == []


def test_the_bot_removed_drops_everything_and_stops_the_running_turn(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, messages=3)
    assert store.turns.start(turn, "t1", "w") is not None
    change = store.changes.evict(chat_id, store.server_ms())
    assert (change.how, change.dropped) == ("stopping", 2)
    assert store.changes.evict(chat_id, 0).how == "stopping", "redelivered: nothing more"
    assert len(stopping_jobs(redis_client, chat_id)) == 1
    assert store.turns.heartbeat([turn]) == ["stopped"]
    assert store.turns.complete(turn, outcome="stopped").outcome == "idle"
    assert store.pending(chat_id) == [] and store.lease(chat_id) == {}
    assert sorted(outcomes(store, chat_id)) == [
        ("om_1", "removed"), ("om_2", "removed"), ("om_3", "removed")]
    late = dataclasses.replace(msg(chat_id, 4), create_time_ms=store.server_ms() - 5000)
    assert store.inbox.ingest(late).outcome == "left", "sent before the removal, arriving late"
    back = dataclasses.replace(msg(chat_id, 5), create_time_ms=store.server_ms() + 1000)
    assert store.inbox.ingest(back).outcome == "claimed", "sent once the bot was back"


def test_the_bot_removed_before_a_turn_started_leaves_the_chat_idle(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, messages=2)
    change = store.changes.evict(chat_id, 0)
    assert (change.how, change.dropped) == ("idle", 2)
    assert store.turns.start(turn, "t1", "w") is None
    assert store.pending(chat_id) == [] and store.lease(chat_id) == {}
    assert store.recovery.recover(chat_id) is None
    assert store.changes.evict(f"{chat_id}_never", 0).how == "none"


def test_a_removal_delivered_again_drops_nothing_sent_once_the_bot_was_back(
        redis_client: redis.Redis, chat_id: str) -> None:
    """The bot was removed, added back and spoken to; then Feishu delivers the removal again
    (its first ACK was lost): only what was created before the removal goes, so the running
    turn and the message waiting behind it, both sent since, are untouched."""
    store = store_for(redis_client)
    removed_at = store.server_ms() - 10_000
    assert store.changes.evict(chat_id, removed_at).how == "none"
    turn = store.inbox.ingest(msg(chat_id, 1, removed_at + 5000)).claimed
    assert turn is not None and store.inbox.ingest(msg(chat_id, 2, removed_at + 6000)).outcome \
        == "queued"
    assert store.turns.start(turn, "t1", "w") is not None
    change = store.changes.evict(chat_id, removed_at)
    assert (change.how, change.dropped) == ("none", 0), "nothing of the chat since"
    assert pending_ids(store, chat_id) == ["om_1", "om_2"]
    assert store.turns.heartbeat([turn]) == ["held"], "its turn goes on"
    assert not stopping_jobs(redis_client, chat_id)
    following = store.turns.complete(turn, outcome="replied").following
    assert following is not None and following.message_id == "om_2"


def test_a_removal_drops_what_came_before_it_and_claims_what_came_after(
        redis_client: redis.Redis, chat_id: str) -> None:
    """Messages both sides of a removal wait (the one before arrived late): the removal,
    delivered once they are in, drops the one before and gives the one after a turn."""
    store = store_for(redis_client)
    now = store.server_ms()
    turn = store.inbox.ingest(msg(chat_id, 1, now - 9000)).claimed
    assert turn is not None and store.inbox.ingest(msg(chat_id, 2, now - 1000)).outcome == "queued"
    change = store.changes.evict(chat_id, now - 5000)
    assert (change.how, change.dropped) == ("claimed", 1)
    assert change.following is not None and change.following.message_id == "om_2"
    assert store.turns.start(turn, "old", "w") is None, "the turn of the message dropped is stale"
    assert pending_ids(store, chat_id) == ["om_2"]
    assert outcomes(store, chat_id) == [("om_1", "removed")]


@pytest.fixture
def upgraded(redis_client: redis.Redis) -> Iterator[ChatStore]:
    """A store on a Redis that held an earlier version's state, just after this version's
    first process started: the version before may still run beside it."""
    before = redis_client.get(MARKS_SINCE_KEY)
    redis_client.delete(MARKS_SINCE_KEY)
    redis_client.set(KEYSPACE_KEY, "0")
    store = store_for(redis_client)
    store.claim_keyspace()
    assert store.upgrade.now().mixed
    yield store
    redis_client.delete(MARKS_SINCE_KEY)  # (the other tests' Redis: as it was)
    if before is not None:
        redis_client.set(MARKS_SINCE_KEY, before)


def test_while_the_version_before_may_run_it_sees_what_this_one_admitted(
        redis_client: redis.Redis, upgraded: ChatStore, chat_id: str) -> None:
    store = upgraded
    created = redis_ms(redis_client)
    assert store.inbox.ingest(msg(chat_id, 1, create_ms=created)).outcome == "claimed"
    assert redis_client.get(ChatKeys(chat_id).seen("om_1")) == "1"  # its key per message
    redis_client.set(ChatKeys(chat_id).seen("om_2"), "1", ex=3600)  # admitted by it
    assert store.inbox.ingest(msg(chat_id, 2, create_ms=created)).outcome == "duplicate"


def test_while_the_version_before_may_run_its_stop_keeps_a_turn_mute(
        redis_client: redis.Redis, upgraded: ChatStore, chat_id: str) -> None:
    store = upgraded
    turn = first_turn(store, chat_id)
    assert store.turns.start(turn, "t1", "w") is not None
    # its /stop raises the flag alone, not the lease's copy
    redis_client.hset(ChatKeys(chat_id).stop, mapping={"fence": str(turn.fence), "why": "stopped"})
    assert not store.turns.keep_answer(turn, Answer("reply", ("late",))), "a stopped turn is mute"
    store.turns.complete(turn, outcome="stopped")
    assert [(r.message_id, r.outcome) for r in read_history(redis_client, store.keys(chat_id))] \
        == [("om_1", "stopped")]


def test_after_the_upgrade_a_message_older_than_it_is_still_looked_up_by_its_old_key(
        redis_client: redis.Redis, upgraded: ChatStore, chat_id: str) -> None:
    now = redis_ms(redis_client)
    redis_client.set(MARKS_SINCE_KEY, now - 2 * 86_400_000)  # the upgrade ended a day ago
    store = store_for(redis_client)
    assert not store.upgrade.now().mixed
    redis_client.set(ChatKeys(chat_id).seen("om_1"), "1", ex=3600)  # admitted before it
    created = now - 3 * 86_400_000
    assert store.inbox.ingest(msg(chat_id, 1, create_ms=created)).outcome == "duplicate"


def test_an_edit_saying_no_create_time_before_its_message_is_kept_for_it(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    assert store.changes.revise(msg(chat_id, 1, text="edited first"), 2000) == "kept"  # (no date)
    turn = store.inbox.ingest(msg(chat_id, 1, create_ms=redis_ms(redis_client),
                            text="original")).claimed
    assert text_it_runs(store, turn) == "edited first"

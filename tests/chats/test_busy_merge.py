"""Busy mode merge in the chat's scripts against a real redis-server: the merge window, one
turn for every waiting message, its batch fixed for re-runs, dropped whole by complete,
/stop and a lease that ran out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from gateway.chats.history import read_history
from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, MergeWait, Started, TurnRef
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from tests.support.rig import client_of
from tests.support.store import lease_gone, msg, pending_ids, started, store_for


@pytest.fixture
def redis_client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


def merging(client: redis.Redis, **overrides: int) -> ChatStore:
    return store_for(client, **{"inbox_cap": 10, "merge_window_ms": 300, **overrides})


def admit(store: ChatStore, chat_id: str, *numbers: int, create_ms: int = 0) -> TurnRef | None:
    """Admit om_<n> for each number under busy mode merge; the turn claimed, if one was."""
    claimed = None
    for n in numbers:
        claimed = store.inbox.ingest(msg(chat_id, n, create_ms=create_ms or n * 1000),
                               busy="merge").claimed or claimed
    return claimed


def test_messages_in_quick_succession_become_one_turn_answered_once(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = merging(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None
    wait = store.turns.start_or_wait(turn, "task", "w")
    assert isinstance(wait, MergeWait) and 0 < wait.ms <= 300, "a fresh message waits"
    admit(store, chat_id, 2, 3)
    assert isinstance(store.turns.start_or_wait(turn, "task", "w"), MergeWait)
    first = started(store, turn)
    assert first.message_id == "om_1" and first.attempt == 1
    assert first.merged_ids == ("om_1", "om_2", "om_3")
    assert [m.text for m in first.merged] == ["text 1", "text 2", "text 3"]
    assert store.turns.complete(turn, outcome="replied").outcome == "idle"
    assert pending_ids(store, chat_id) == []
    records = read_history(redis_client, store.keys(chat_id))
    assert [(r.message_id, r.outcome) for r in records] == [
        ("om_3", "replied"), ("om_2", "replied"), ("om_1", "replied")]
    for n in (1, 2, 3):  # a redelivery of any of them is a duplicate
        assert store.inbox.ingest(msg(chat_id, n, create_ms=n * 1000),
                            busy="merge").outcome == "duplicate"


def test_queue_mode_never_waits_and_runs_one_message_a_turn(redis_client: redis.Redis,
                                                            chat_id: str) -> None:
    store = merging(redis_client)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    assert turn is not None
    first = store.turns.start_or_wait(turn, "task", "w")
    assert isinstance(first, Started) and first.merged == ()
    following = store.turns.complete(turn).following
    assert following is not None and following.message_id == "om_2"


def test_messages_sent_while_a_turn_runs_become_the_next_turn(redis_client: redis.Redis,
                                                              chat_id: str) -> None:
    store = merging(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).merged == ()
    admit(store, chat_id, 2, 3, 4)
    # merge mode claims the next turn (never starts it in complete): its start fixes the batch
    done = store.turns.complete(turn, ("task-2", "w"), outcome="replied")
    assert done.outcome == "claimed" and done.following is not None
    assert started(store, done.following).merged_ids == ("om_2", "om_3", "om_4")


def test_a_rerun_after_a_crash_answers_the_same_messages_and_later_ones_wait(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = merging(redis_client, running_ttl_ms=200)
    turn = admit(store, chat_id, 1, 2)
    assert turn is not None and started(store, turn).merged_ids == ("om_1", "om_2")
    assert store.turns.keep_answer(turn, Answer("reply", ("both answered",)))
    admit(store, chat_id, 3)  # arrives while the turn runs; then its worker dies
    lease_gone(store, chat_id)
    found = store.recovery.recover(chat_id)
    assert found is not None and found[0] == "claimed"
    rerun = store.turns.start_or_wait(found[1], "task", "w")
    assert isinstance(rerun, Started), "a re-run never waits"
    assert rerun.attempt == 2 and rerun.merged_ids == ("om_1", "om_2")
    assert rerun.answer == Answer("reply", ("both answered",))
    following = store.turns.complete(found[1], outcome="resent").following
    assert pending_ids(store, chat_id) == ["om_3"]
    assert following is not None and following.message_id == "om_3"


def test_a_merged_turn_published_again_before_its_start_still_merges(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = merging(redis_client, claim_ttl_ms=200)
    admit(store, chat_id, 1, 2)  # claimed, then its publisher died before the worker came
    wait_until(lambda: chat_id in store.recovery.due_chats(), 3, "the claim TTL to pass")
    found = store.recovery.recover(chat_id)
    assert found is not None and found[0] == "requeue"
    assert isinstance(store.turns.start_or_wait(found[1], "task", "w"), MergeWait)
    assert started(store, found[1]).merged_ids == ("om_1", "om_2")


def test_a_stop_before_the_merged_turn_starts_drops_what_was_sent_before_it(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = merging(redis_client)
    admit(store, chat_id, 1, 2)
    admit(store, chat_id, 3, create_ms=9000)  # sent after the /stop
    step = store.cancels.cancel(chat_id, "stop", debounce_ms=0, flag_ttl_ms=60_000, sent_ms=5000)
    assert step.how == "not-started"
    assert pending_ids(store, chat_id) == ["om_3"]
    assert step.following is not None and step.following.message_id == "om_3"
    records = read_history(redis_client, store.keys(chat_id))
    assert sorted((r.message_id, r.outcome) for r in records) == [
        ("om_1", "stopped"), ("om_2", "stopped")]


def test_a_stopped_merged_turn_drops_all_its_messages(redis_client: redis.Redis,
                                                      chat_id: str) -> None:
    store = merging(redis_client)
    turn = admit(store, chat_id, 1, 2)
    assert turn is not None and started(store, turn).merged_ids == ("om_1", "om_2")
    admit(store, chat_id, 3)
    assert store.cancels.cancel(chat_id, "stop", debounce_ms=0, flag_ttl_ms=60_000).how == "running"
    following = store.turns.complete(turn, outcome="stopped").following
    assert pending_ids(store, chat_id) == ["om_3"]
    assert following is not None and following.message_id == "om_3"


def test_a_stopped_merged_turn_whose_lease_ran_out_is_dropped_whole(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = merging(redis_client, running_ttl_ms=200, stop_hold_ms=400)
    turn = admit(store, chat_id, 1, 2)
    assert turn is not None and started(store, turn).merged_ids == ("om_1", "om_2")
    admit(store, chat_id, 3)
    assert store.cancels.cancel(chat_id, "stop", debounce_ms=0, flag_ttl_ms=60_000).how == "running"
    lease_gone(store, chat_id)  # its worker and its canceller died
    found = store.recovery.recover(chat_id)
    assert found is not None and found[1].message_id == "om_3"
    assert pending_ids(store, chat_id) == ["om_3"]


def test_the_wait_is_capped_while_messages_keep_coming(redis_client: redis.Redis,
                                                       chat_id: str) -> None:
    store = merging(redis_client, merge_window_ms=200)
    turn = admit(store, chat_id, 1)
    assert turn is not None
    n = 1

    def keep_typing() -> bool:
        nonlocal n
        n += 1
        admit(store, chat_id, n)
        return isinstance(store.turns.start_or_wait(turn, "task", "w"), Started)

    wait_until(keep_typing, 5, "the turn to start though messages keep coming",
               interval_s=0.05)
    assert n < 30, "it started within about four windows"


def test_a_chat_switched_back_to_queue_runs_one_message_a_turn(redis_client: redis.Redis,
                                                               chat_id: str) -> None:
    store = merging(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None
    store.inbox.ingest(msg(chat_id, 2))  # the setting changed: the latest message's mode holds
    first = store.turns.start_or_wait(turn, "task", "w")
    assert isinstance(first, Started) and first.merged == ()



def test_a_message_withdrawn_from_a_running_merged_turn_leaves_the_others_to_the_next(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = merging(redis_client)
    turn = admit(store, chat_id, 1, 2, 3)
    assert turn is not None
    assert started(store, turn).merged_ids == ("om_1", "om_2", "om_3")
    assert store.changes.withdraw(chat_id, "om_2").how == "stopping"
    assert not store.turns.keep_answer(turn, Answer("reply", ("too late",))), "the turn is stopped"
    following = store.turns.complete(turn, outcome="stopped").following
    assert following is not None and following.message_id == "om_1"
    assert started(store, following).merged_ids == ("om_1", "om_3")
    assert store.turns.complete(following, outcome="replied").outcome == "idle"
    latest: dict[str, str] = {}
    for record in read_history(redis_client, store.keys(chat_id)):  # newest first
        latest.setdefault(record.message_id, record.outcome)
    assert latest == {"om_1": "replied", "om_2": "withdrawn", "om_3": "replied"}


def test_an_edit_to_a_message_of_a_started_merged_turn_gets_no_second_answer(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = merging(redis_client)
    turn = admit(store, chat_id, 1, 2, 3)
    assert turn is not None
    assert started(store, turn).merged_ids == ("om_1", "om_2", "om_3")
    assert store.changes.revise(msg(chat_id, 2, text="edited"), 5000) == "started"
    assert store.turns.complete(turn, outcome="replied").outcome == "idle"
    assert pending_ids(store, chat_id) == [], "nothing of the merged turn waits again"

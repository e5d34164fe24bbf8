"""The chat state scripts against a real redis-server: order, dedupe, fencing, recovery."""

from __future__ import annotations

import time

import redis

from gateway.chats import ChatKeys, ChatStore, Dispatch
from gateway.types import Message


def store_for(client: redis.Redis, **overrides: int) -> ChatStore:
    options = {"claim_ttl_ms": 5000, "queued_ttl_ms": 60_000, "running_ttl_ms": 5000,
               "dedupe_ttl_s": 86_400, "inbox_cap": 3, **overrides}
    return ChatStore(client, **options)


def msg(chat_id: str, n: int) -> Message:
    return Message(f"om_{n}", chat_id, "p2p", "ou_u", "text", f"text {n}")


def test_first_message_takes_the_lease_later_ones_queue(redis_client: redis.Redis,
                                                        chat_id: str) -> None:
    store = store_for(redis_client)
    first = store.ingest(msg(chat_id, 1))
    assert first.outcome == "dispatch" and first.dispatch == Dispatch(chat_id, "om_1", 1)
    second = store.ingest(msg(chat_id, 2))
    assert (second.outcome, second.ahead, second.dispatch) == ("queued", 1, None)


def test_duplicate_is_refused_and_full_inbox_is_reported(redis_client: redis.Redis,
                                                         chat_id: str) -> None:
    store = store_for(redis_client)
    for n in range(3):
        store.ingest(msg(chat_id, n))
    assert store.ingest(msg(chat_id, 0)).outcome == "duplicate"
    full = store.ingest(msg(chat_id, 9))
    assert (full.outcome, full.ahead) == ("full", 3)
    assert [m.message_id for m in store.pending(chat_id)] == ["om_0", "om_1", "om_2"]
    ttl = redis_client.ttl(ChatKeys(chat_id).seen("om_0"))
    assert ttl > 86_000


def test_turns_run_in_order_and_complete_hands_over_with_a_new_fence(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = store.ingest(msg(chat_id, 1)).dispatch
    store.ingest(msg(chat_id, 2))
    assert turn is not None
    started = store.start(turn, "task-1", "w1")
    assert started is not None and started.message.message_id == "om_1"
    assert store.start(turn, "task-1-again", "w2") is None, "a second delivery must not run"
    following = store.complete(turn)
    assert following == Dispatch(chat_id, "om_2", 2)
    assert store.complete(turn) is False, "a stale fence touches nothing"
    assert [m.message_id for m in store.pending(chat_id)] == ["om_2"]
    assert store.start(following, "task-2", "w1") is not None
    assert store.complete(following) is None
    assert store.pending(chat_id) == [] and store.lease(chat_id) == {}


def test_expired_lease_is_recovered_and_the_old_turn_is_fenced_off(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, running_ttl_ms=200)
    turn = store.ingest(msg(chat_id, 1)).dispatch
    assert turn is not None and store.start(turn, "t", "w") is not None
    assert store.recover(chat_id) is None, "a live lease is left alone"
    deadline = time.monotonic() + 5
    while store.lease(chat_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert chat_id in store.due_chats()
    again = store.recover(chat_id)
    assert again == Dispatch(chat_id, "om_1", 2)
    assert not store.holds(turn) and store.heartbeat(turn) == "lost"
    assert store.complete(turn) is False
    assert [m.message_id for m in store.pending(chat_id)] == ["om_1"]


def test_a_stopped_turn_whose_lease_ran_out_is_dropped_not_rerun(
        redis_client: redis.Redis, chat_id: str) -> None:
    """If the canceller dies after raising the flag, the sweeper finishes its work."""
    store = store_for(redis_client, running_ttl_ms=200)
    turn = store.ingest(msg(chat_id, 1)).dispatch
    store.ingest(msg(chat_id, 2))
    assert turn is not None and store.start(turn, "t", "w") is not None
    store.request_cancel(turn, ttl_ms=60_000)
    assert store.heartbeat(turn) == "cancelled" and not store.may_reply(turn)
    deadline = time.monotonic() + 5
    while store.lease(chat_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.recover(chat_id) == Dispatch(chat_id, "om_2", 2)
    assert [m.message_id for m in store.pending(chat_id)] == ["om_2"]


def test_attempts_are_counted_per_head_and_exhausted_after_the_cap(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, running_ttl_ms=100, max_attempts=2)
    turn = store.ingest(msg(chat_id, 1)).dispatch
    store.ingest(msg(chat_id, 2))
    attempts = []
    for _ in range(3):
        assert turn is not None
        started = store.start(turn, "t", "w")
        assert started is not None
        attempts.append((started.attempt, started.exhausted))
        deadline = time.monotonic() + 5
        while store.lease(chat_id) and time.monotonic() < deadline:
            time.sleep(0.02)
        turn = store.recover(chat_id)  # the worker died: the sweeper tries again
    assert attempts == [(1, False), (2, False), (2, True)]
    assert turn is not None and store.start(turn, "t", "w") is not None
    following = store.complete(turn)
    assert following and following.message_id == "om_2"
    second = store.start(following, "t2", "w")
    assert second is not None and (second.attempt, second.exhausted) == (1, False)
    assert redis_client.hgetall(ChatKeys(chat_id).tries) == {"om_2": "1"}

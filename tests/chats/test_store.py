"""The chat state scripts against a real redis-server: order, dedupe, fencing, recovery."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from gateway.chats.cancel import Canceller, Stopping
from gateway.chats.history import read_history
from gateway.chats.jobs import ControlJobs
from gateway.chats.keys import CONTROL_KEY, ChatKeys, Keyspace, turn_task_id
from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, StoreConfig, TurnRef
from gateway.core.errors import SettingsError
from gateway.core.model import Message
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from tests.support.rig import client_of, start_redis, stop_redis
from tests.support.store import lease_gone, msg, pending_ids, store_for


@pytest.fixture
def redis_client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    """These tests run the sweeper's steps themselves: on a Redis of their own."""
    yield from client_of(private_redis)


def wait_for_next_ms(client: redis.Redis) -> None:
    """Until Redis's clock is a millisecond further on (what the scripts order by)."""
    def server_ms() -> int:
        seconds, micros = client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    now = server_ms()
    wait_until(lambda: server_ms() > now, 5, "Redis's clock to move on", interval_s=0.001)


def test_first_message_takes_the_lease_later_ones_queue(redis_client: redis.Redis,
                                                        chat_id: str) -> None:
    store = store_for(redis_client)
    first = store.inbox.ingest(msg(chat_id, 1))
    assert first.outcome == "claimed" and first.claimed is not None
    assert first.claimed.message_id == "om_1"
    second = store.inbox.ingest(msg(chat_id, 2))
    assert (second.outcome, second.waiting, second.claimed) == ("queued", 1, None)


def test_duplicate_is_refused_and_full_inbox_is_reported(redis_client: redis.Redis,
                                                         chat_id: str) -> None:
    store = store_for(redis_client)
    for n in range(3):
        store.inbox.ingest(msg(chat_id, n))
    assert store.inbox.ingest(msg(chat_id, 0)).outcome == "duplicate"
    full = store.inbox.ingest(msg(chat_id, 9))
    assert (full.outcome, full.waiting) == ("full", 3)
    assert pending_ids(store, chat_id) == ["om_0", "om_1", "om_2"]
    assert redis_client.ttl(ChatKeys(chat_id).marks(None, "om_0")) > 86_000


def test_turns_run_in_order_and_complete_hands_over_with_a_new_fence(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    assert turn is not None
    started = store.turns.start(turn, "task-1", "w1")
    assert started is not None and started.message is not None
    assert started.message.message_id == "om_1" and started.attempt == 1
    assert store.turns.start(turn, "task-1-again", "w2") is None, "a second delivery must not run"
    following = store.turns.complete(turn).following
    assert following and following.message_id == "om_2" and following.fence > turn.fence
    assert store.turns.complete(turn).outcome == "stale", "a stale fence touches nothing"
    assert pending_ids(store, chat_id) == ["om_2"]
    assert store.turns.start(following, "task-2", "w1") is not None
    assert store.turns.complete(following).outcome == "idle"
    assert store.pending(chat_id) == [] and store.lease(chat_id) == {}


def test_waiting_messages_run_in_create_time_order_behind_a_dispatched_one(
        redis_client: redis.Redis, chat_id: str) -> None:
    """A message that arrives late (refused during a blip, or via another listener)
    takes its place among the waiting ones by Feishu's create_time, ties by arrival; the
    turn that already started is never overtaken."""
    store = store_for(redis_client, inbox_cap=10)
    head = store.inbox.ingest(msg(chat_id, 3, create_ms=3_000)).claimed
    assert head is not None
    assert store.turns.start(head, "t", "w") is not None
    for n, create_ms in ((5, 5_000), (2, 2_000), (4, 4_000), (1, 1_000), (6, 4_000)):
        store.inbox.ingest(msg(chat_id, n, create_ms=create_ms))
    order = []
    turn: TurnRef | None = head
    while turn is not None:
        order.append(turn.message_id)
        assert store.turns.start(turn, "t", "w") is not None or turn is head
        turn = store.turns.complete(turn).following
    assert order == ["om_3", "om_1", "om_2", "om_4", "om_6", "om_5"]


def test_expired_lease_is_recovered_and_the_old_turn_is_fenced_off(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, running_ttl_ms=200)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    assert store.recovery.recover(chat_id) is None, "a live lease is left alone"
    lease_gone(store, chat_id)
    assert chat_id in store.recovery.due_chats()
    found = store.recovery.recover(chat_id)
    assert found is not None and found[0] == "claimed"
    again = found[1]
    assert again.message_id == "om_1" and again.fence > turn.fence
    assert not store.turns.holds(turn) and store.turns.heartbeat([turn]) == ["lost"]
    assert store.turns.complete(turn).outcome == "stale"
    assert pending_ids(store, chat_id) == ["om_1"]


def test_deadlines_follow_the_redis_clock_not_the_writer_s(
        redis_client: redis.Redis, chat_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose clock is 10 minutes fast must not delay recovery elsewhere."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 600)
    store = store_for(redis_client, running_ttl_ms=200)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    monkeypatch.setattr(time, "time", real)
    lease_gone(store, chat_id)
    wait_until(lambda: chat_id in store.recovery.due_chats(), 1,
               "the chat to be due by Redis's clock")


def test_fences_never_repeat_even_when_redis_loses_its_last_writes(
        redis_client: redis.Redis, chat_id: str) -> None:
    """After a crash with appendfsync everysec or a failover to a lagging replica,
    the state goes back in time; a fence issued after that point must never be issued again,
    or a stale turn would pass every check."""
    store = store_for(redis_client)
    keys = ChatKeys(chat_id)
    before = {key: redis_client.dump(key) for key in (keys.fence, keys.tries, keys.lease,
                                                     keys.inbox)}
    lost = store.inbox.ingest(msg(chat_id, 1)).claimed  # these writes will be "lost"
    assert lost is not None and store.turns.start(lost, "t-lost", "w") is not None
    for key, dumped in before.items():  # the server restarts from the older state
        redis_client.delete(key)
        if dumped is not None:
            redis_client.restore(key, 0, dumped)
    fresh = store.inbox.ingest(msg(chat_id, 2)).claimed
    assert fresh is not None and fresh.fence > lost.fence
    assert store.turns.start(fresh, "t-fresh", "w") is not None
    assert store.turns.heartbeat([lost]) == ["lost"]
    assert store.turns.complete(lost).outcome == "stale"
    assert store.turns.holds(fresh)


def test_a_queued_turn_nobody_picked_up_is_published_again_under_the_same_fence(
        redis_client: redis.Redis, chat_id: str) -> None:
    """A turn taken by a worker that died before starting it (reserved,
    prefetched) is published again after the lease TTL, and still runs only once."""
    store = store_for(redis_client, claim_ttl_ms=200, running_ttl_ms=200, requeue_cap_ms=800)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None and store.lease(chat_id)["state"] == "queued"
    assert store.recovery.recover(chat_id) is None
    wait_until(lambda: chat_id in store.recovery.due_chats(), 2, "the requeue deadline")
    assert store.recovery.recover(chat_id) == ("requeue", turn)
    assert store.lease(chat_id)["state"] == "queued"
    assert store.recovery.recover(chat_id) is None, "the next requeue waits longer (backoff)"
    assert store.turns.start(turn, "task-1", "w2") is not None, "one copy runs"
    assert store.turns.start(turn, "task-1", "w3") is None, "the other copy is skipped"


def test_a_stopped_running_turn_whose_lease_ran_out_is_dropped_not_rerun(
        redis_client: redis.Redis, chat_id: str) -> None:
    """If the canceller dies after raising the flag, the sweeper finishes its work."""
    store = store_for(redis_client, running_ttl_ms=200, stop_hold_ms=400)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    step = store.cancels.cancel(chat_id, "cmd-1", debounce_ms=0, flag_ttl_ms=60_000)
    assert (step.how, step.fence, step.waiting) == ("running", turn.fence, 1)
    assert store.turns.heartbeat([turn]) == ["stopped"]
    assert not store.turns.keep_answer(turn, Answer("reply", ("late",))), "a stopped turn is mute"
    lease_gone(store, chat_id)
    found = store.recovery.recover(chat_id)
    assert found is not None and found[1].message_id == "om_2"
    assert pending_ids(store, chat_id) == ["om_2"]
    [record] = read_history(redis_client, store.keys(chat_id))
    assert (record.message_id, record.outcome, record.fence, record.task_id) == (
        "om_1", "stopped", str(turn.fence), "t")
    assert record.entry, "a stopped turn can be retried"


def test_a_turn_ignoring_its_stop_is_fenced_at_the_timeout_whatever_its_lease_had_left(
        redis_client: redis.Redis, chat_id: str) -> None:
    """Its heartbeat may have extended the lease just before the stop, leaving less than the
    cancel timeout: the lease must not run out first, or the stop would read as cooperative,
    terminate nothing and leave the message behind it to the sweeper."""
    store = store_for(redis_client, running_ttl_ms=300, stop_hold_ms=1300)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    published: list[TurnRef] = []
    revoked: list[tuple[str, bool]] = []

    canceller = Canceller(store, published.append,
                          lambda task_id, terminate: revoked.append((task_id, terminate)),
                          timeout_s=1.0, lease_ttl_ms=300, debounce_s=0, terminate=True)
    result = canceller.cancel(chat_id, "cmd-1")
    assert (result.how, result.pending) == ("timeout-fenced", 1)
    assert revoked == [("t", True)], "the stuck process is terminated"
    assert [t.message_id for t in published] == ["om_2"], "the next one goes at once"


def test_a_sweeper_looking_at_a_stopping_chat_leaves_its_canceller_the_timeout(
        redis_client: redis.Redis, chat_id: str) -> None:
    """The sweeper brings a lease that outlives its own TTL back to it (a clock stepped
    back); a stopping turn's held lease is not one of those."""
    store = store_for(redis_client, running_ttl_ms=300, stop_hold_ms=1300)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    canceller = Canceller(store, lambda ref: None, lambda task_id, terminate: None,
                          timeout_s=1.0, lease_ttl_ms=300,
                          debounce_s=0)
    waiting = canceller.begin(chat_id, "cmd-1")
    assert isinstance(waiting, Stopping)
    assert store.recovery.recover(chat_id) is None, "held: nothing to do"
    time.sleep(0.6)  # (past the running TTL, short of the timeout: what is tested)
    assert store.turns.holds(waiting.turn), "the canceller decides, at its timeout"
    assert canceller.end(waiting, ended=False).how == "timeout-fenced"


def test_a_stop_for_queued_turns_only_leaves_a_running_turn_alone(
        redis_client: redis.Redis, chat_id: str) -> None:
    """A revoked copy of a turn that started meanwhile (Canceller.revoked): decided in the
    same script that would stop it."""
    store = store_for(redis_client)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    step = store.cancels.cancel(chat_id, "copy", debounce_ms=0, flag_ttl_ms=60_000,
                        target_fence=turn.fence, only_queued=True)
    assert step.how == "nothing"
    assert store.turns.may_reply(turn), "no stop flag"
    assert store.turns.heartbeat([turn]) != ["stopped"]


def test_a_stopped_turn_dropped_when_the_next_message_arrives_is_recorded(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, running_ttl_ms=200, stop_hold_ms=400)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    cancelled = store.cancels.cancel(chat_id, "cmd-1", debounce_ms=0, flag_ttl_ms=60_000)
    assert cancelled.how == "running"
    lease_gone(store, chat_id)
    following = store.inbox.ingest(msg(chat_id, 2)).claimed
    assert following is not None and following.message_id == "om_2"
    assert [(r.message_id, r.outcome) for r in read_history(
        redis_client, store.keys(chat_id))] == [("om_1", "stopped")]


def test_stopping_a_turn_not_started_drops_it_in_the_same_step(
        redis_client: redis.Redis, chat_id: str) -> None:
    """No window in which a canceller's death lets the stopped message run."""
    store = store_for(redis_client, claim_ttl_ms=200)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    assert turn is not None
    step = store.cancels.cancel(chat_id, "cmd-1", debounce_ms=0, flag_ttl_ms=60_000)
    assert step.how == "not-started"
    assert step.task_id == turn_task_id(chat_id, "om_1", turn.fence), "its own task, revoked"
    assert step.following is not None and step.following.message_id == "om_2"
    assert store.turns.start(turn, "task-1", "w") is None, "the stopped turn never runs"
    # the canceller dies before publishing the next turn: not started within the claim TTL,
    # the sweeper publishes it
    wait_until(lambda: chat_id in store.recovery.due_chats(), 3, "the claim TTL to pass")
    found = store.recovery.recover(chat_id)
    assert found is not None and found[1].message_id == "om_2"
    again = store.cancels.cancel(chat_id, "cmd-1", debounce_ms=0, flag_ttl_ms=60_000)
    assert (again.how, again.recorded_how) == ("again", "not-started"), "recorded once"
    assert pending_ids(store, chat_id) == ["om_2"]


def test_a_second_stop_within_the_debounce_acts_once(redis_client: redis.Redis,
                                                     chat_id: str) -> None:
    """The message the first /stop promised to answer is answered."""
    store = store_for(redis_client)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    first = store.cancels.cancel(chat_id, "stop-a", debounce_ms=3000, flag_ttl_ms=60_000)
    assert first.how == "running"
    following = store.turns.complete(turn).following
    assert following and following.message_id == "om_2"
    second = store.cancels.cancel(chat_id, "stop-b", debounce_ms=3000, flag_ttl_ms=60_000)
    assert (second.how, second.waiting) == ("debounced", 0)
    assert store.turns.start(following, "t2", "w") is not None, "the promised message runs"


def test_commands_and_notices_are_recorded_in_the_same_step_as_seen(
        redis_client: redis.Redis, chat_id: str) -> None:
    """Nothing is marked seen without something durable to act on."""
    store = store_for(redis_client, inbox_cap=1)
    before = redis_client.xlen(CONTROL_KEY) if redis_client.exists(CONTROL_KEY) else 0
    assert store.inbox.ingest(msg(chat_id, 1, text="/stop"), "stop").outcome == "command"
    assert store.inbox.ingest(msg(chat_id, 1, text="/stop"), "stop").outcome == "duplicate"
    store.inbox.ingest(msg(chat_id, 2))
    assert store.inbox.ingest(msg(chat_id, 3)).outcome == "full"
    jobs: list[Any] = list(redis_client.xrange(CONTROL_KEY) or [])[before:]
    kinds = [(fields["kind"], fields["chat"]) for _, fields in jobs]
    assert kinds == [("command", chat_id), ("inbox-full", chat_id)]


def test_an_answer_is_kept_for_a_rerun_and_attempts_are_counted(
        redis_client: redis.Redis, chat_id: str) -> None:
    """A re-run after a crash resends the stored answer, never asks again."""
    store = store_for(redis_client, running_ttl_ms=100, max_attempts=2)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None
    first = store.turns.start(turn, "t", "w")
    assert first is not None and first.answer is None
    assert store.turns.keep_answer(turn, Answer("reply", ("part 1", "part 2")))
    lease_gone(store, chat_id)  # the worker died mid-send
    found = store.recovery.recover(chat_id)
    assert found is not None
    rerun = store.turns.start(found[1], "t", "w")
    assert rerun is not None and rerun.attempt == 2
    assert rerun.answer == Answer("reply", ("part 1", "part 2"))
    assert store.turns.complete(found[1]).outcome == "idle"
    assert not redis_client.hexists(ChatKeys(chat_id).tries, "chunks"), "the kept answer went"


def test_attempts_are_exhausted_after_the_cap(redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, running_ttl_ms=100, max_attempts=2)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    store.inbox.ingest(msg(chat_id, 2))
    attempts = []
    for _ in range(3):
        assert turn is not None
        started = store.turns.start(turn, "t", "w")
        assert started is not None
        attempts.append((started.attempt, started.exhausted))
        lease_gone(store, chat_id)
        found = store.recovery.recover(chat_id)  # the worker died: the sweeper tries again
        assert found is not None
        turn = found[1]
    assert attempts == [(1, False), (2, False), (3, True)]
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    following = store.turns.complete(turn).following
    assert following and following.message_id == "om_2"
    second = store.turns.start(following, "t2", "w")
    assert second is not None and (second.attempt, second.exhausted) == (1, False)
    tries = redis_client.hgetall(ChatKeys(chat_id).tries)
    assert "|om_2|" in tries["head"] and tries["n"] == "1" and not tries.get("aid"), \
        "only the head's attempts are kept, nothing of the message before"


def test_stored_messages_are_read_tolerantly(redis_client: redis.Redis, chat_id: str) -> None:
    """An entry written by a newer version (one more field) or missing optional
    fields still runs; one that is not a message at all is reported, not a crash."""
    store = store_for(redis_client, inbox_cap=10)
    newer = json.dumps({"message_id": "om_new", "chat_id": chat_id, "text": "hi",
                        "future_field": 1})
    assert Message.from_json(newer).text == "hi"
    with pytest.raises(ValueError):
        Message.from_json('["not", "a", "message"]')
    redis_client.zadd(ChatKeys(chat_id).inbox, {f"0000000000000001|om_new|{newer}": 1})
    redis_client.zadd(ChatKeys(chat_id).inbox, {"0000000000000002|om_bad|{nope": 2})
    turn = store.inbox.ingest(msg(chat_id, 9, create_ms=10)).claimed
    assert turn is not None and turn.message_id == "om_new"
    started = store.turns.start(turn, "t", "w")
    assert started is not None and started.message is not None
    following = store.turns.complete(turn).following
    assert following and following.message_id == "om_bad"
    bad = store.turns.start(following, "t", "w")
    assert bad is not None and bad.message is None and bad.message_id == "om_bad"


def test_no_chat_key_is_left_without_a_ttl(redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    store.cancels.cancel(chat_id, "new", debounce_ms=0, flag_ttl_ms=10_000, new_session=True)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    store.cancels.cancel(chat_id, "cmd", debounce_ms=1000, flag_ttl_ms=10_000)
    assert store.turns.complete(turn).outcome == "idle"
    keys = redis_client.keys(f"gw:{{{chat_id}}}:*")
    assert keys and all(redis_client.pttl(key) > 0 for key in keys), {
        key: redis_client.pttl(key) for key in keys}


def test_a_claimed_turn_not_yet_started_yields_to_an_older_late_message(
        redis_client: redis.Redis, chat_id: str) -> None:
    """A message refused during a Redis restart and redelivered after a later one had been
    claimed (but before any worker started it) runs first: the order is fixed when a turn
    starts, not when it is claimed. The task of the claimed one runs it, under its fence."""
    store = store_for(redis_client, inbox_cap=10)
    claimed = store.inbox.ingest(msg(chat_id, 2, create_ms=2_000)).claimed
    assert claimed is not None and claimed.message_id == "om_2"
    store.inbox.ingest(msg(chat_id, 1, create_ms=1_000))  # late, older: Feishu redelivered it
    started = store.turns.start(claimed, "t", "w")
    assert started is not None and started.message_id == "om_1" and started.attempt == 1
    assert store.lease(chat_id)["message_id"] == "om_1"
    ran = TurnRef(chat_id, started.message_id, claimed.fence)
    assert store.turns.keep_answer(ran, Answer("reply", ("one",)))
    following = store.turns.complete(ran).following
    assert following and following.message_id == "om_2"
    again = store.turns.start(following, "t", "w")
    assert again is not None and again.message_id == "om_2" and again.answer is None


def test_a_stop_before_the_start_drops_the_message_that_would_have_run(
        redis_client: redis.Redis, chat_id: str) -> None:
    """The claimed turn would run the older late message (see above), so a /stop that
    comes before any worker started it drops that one; the claimed one runs next."""
    store = store_for(redis_client, inbox_cap=10)
    claimed = store.inbox.ingest(msg(chat_id, 2, create_ms=2_000)).claimed
    assert claimed is not None
    store.inbox.ingest(msg(chat_id, 1, create_ms=1_000))  # late, older
    step = store.cancels.cancel(chat_id, "cmd-1", debounce_ms=0, flag_ttl_ms=5000)
    assert step.how == "not-started" and step.following is not None
    assert step.following.message_id == "om_2"
    assert pending_ids(store, chat_id) == ["om_2"]


def test_a_dispatched_message_is_not_overtaken_when_its_worker_dies(
        redis_client: redis.Redis, chat_id: str) -> None:
    """A message that arrives late with an older create_time must not take the place of
    the one that already started: after a crash, the same message runs again, with its
    stored answer and its attempt count."""
    store = store_for(redis_client, running_ttl_ms=200, inbox_cap=10)
    turn = store.inbox.ingest(msg(chat_id, 2, create_ms=2_000)).claimed
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    assert store.turns.keep_answer(turn, Answer("reply", ("half sent",)))
    store.inbox.ingest(msg(chat_id, 1, create_ms=1_000))  # late, older
    lease_gone(store, chat_id)  # the worker died
    found = store.recovery.recover(chat_id)
    assert found is not None and found[1].message_id == "om_2", "the started one runs again"
    rerun = store.turns.start(found[1], "t", "w")
    assert rerun is not None and rerun.attempt == 2
    assert rerun.answer == Answer("reply", ("half sent",))
    following = store.turns.complete(found[1]).following
    assert following and following.message_id == "om_1"


def test_a_stop_run_again_after_later_stops_never_stops_a_later_turn(
        redis_client: redis.Redis, chat_id: str) -> None:
    """A /stop whose desk died is finished by another desk later, maybe after other /stops:
    it acts once, on the turn that ran when it was sent, and never on a later one."""
    store = store_for(redis_client, inbox_cap=10)
    for n in range(1, 4):
        store.inbox.ingest(msg(chat_id, n))

    def running() -> TurnRef:
        lease = store.lease(chat_id)
        turn = TurnRef(chat_id, lease["message_id"], int(lease["fence"]))
        assert store.turns.start(turn, "t", "w") is not None
        return turn

    first = running()
    stop_1 = store.cancels.cancel(chat_id, "stop-1", debounce_ms=0, flag_ttl_ms=60_000,
                          target_fence=first.fence)
    assert stop_1.how == "running"
    second = store.turns.complete(first).following
    assert second and store.turns.start(second, "t", "w") is not None
    stop_2 = store.cancels.cancel(chat_id, "stop-2", debounce_ms=0, flag_ttl_ms=60_000,
                          target_fence=second.fence)
    assert stop_2.how == "running"
    third = store.turns.complete(second).following
    assert third and store.turns.start(third, "t", "w") is not None
    again = store.cancels.cancel(chat_id, "stop-1", debounce_ms=0, flag_ttl_ms=60_000,
                         target_fence=first.fence)
    assert (again.how, again.recorded_how) == ("again", "running")
    assert store.turns.heartbeat([third]) == ["held"], "the third turn goes on"
    late = store.cancels.cancel(chat_id, "stop-9", debounce_ms=0, flag_ttl_ms=60_000,
                        target_fence=first.fence)
    assert late.how == "nothing", "a stop for a turn that is over stops nothing"
    assert store.turns.heartbeat([third]) == ["held"]


def test_a_debounced_stop_run_again_stays_debounced(redis_client: redis.Redis,
                                                    chat_id: str) -> None:
    store = store_for(redis_client, inbox_cap=10)
    store.inbox.ingest(msg(chat_id, 1))
    store.inbox.ingest(msg(chat_id, 2))
    lease = store.lease(chat_id)
    turn = TurnRef(chat_id, lease["message_id"], int(lease["fence"]))
    assert store.turns.start(turn, "t", "w") is not None
    store.cancels.cancel(chat_id, "stop-a", debounce_ms=60_000, flag_ttl_ms=60_000)
    following = store.turns.complete(turn).following
    assert following and store.turns.start(following, "t", "w") is not None
    assert store.cancels.cancel(chat_id, "stop-b", debounce_ms=60_000, flag_ttl_ms=60_000).how == \
        "debounced"
    again = store.cancels.cancel(chat_id, "stop-b", debounce_ms=0, flag_ttl_ms=60_000)
    assert (again.how, again.recorded_how) == ("again", "debounced")
    assert store.turns.heartbeat([following]) == ["held"]


def test_new_run_again_does_not_start_a_second_conversation(redis_client: redis.Redis,
                                                           chat_id: str) -> None:
    store = store_for(redis_client)
    store.cancels.cancel(chat_id, "new-1", debounce_ms=0, flag_ttl_ms=60_000, new_session=True)
    generation = redis_client.get(ChatKeys(chat_id).generation)
    assert generation is not None
    store.cancels.cancel(chat_id, "new-1", debounce_ms=0, flag_ttl_ms=60_000, new_session=True)
    assert redis_client.get(ChatKeys(chat_id).generation) == generation
    store.cancels.cancel(chat_id, "new-2", debounce_ms=60_000, flag_ttl_ms=60_000, new_session=True)
    assert redis_client.get(ChatKeys(chat_id).generation) != generation, \
        "a debounced /new still starts a new conversation"


def test_a_turn_waiting_long_in_a_backlog_keeps_its_place(redis_client: redis.Redis,
                                                          chat_id: str) -> None:
    """Requeues keep the queued lease alive: a long broker backlog slows a chat down, it
    never sends it to the back of the queue under a new fence."""
    store = store_for(redis_client, claim_ttl_ms=100, running_ttl_ms=100, queued_ttl_ms=400,
                      requeue_cap_ms=100)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None
    deadline = time.monotonic() + 1.2  # three queued TTLs
    while time.monotonic() < deadline:
        found = store.recovery.recover(chat_id)
        assert found is None or found == ("requeue", turn), found
        time.sleep(0.05)
    assert store.turns.start(turn, "task-1", "w") is not None, "the original fence still holds"


def test_behind_a_broker_backlog_a_queued_turn_is_published_again_once_then_never(
        redis_client: redis.Redis, chat_id: str) -> None:
    """At its first deadline a queued turn is published again even behind a backlog: its
    claimer's publish may have been lost (nothing confirms it). After that, while turns wait
    in the broker, it may be one of them: it keeps its lease and is not published again (no
    copies pile up)."""
    store = store_for(redis_client, claim_ttl_ms=200, running_ttl_ms=200, requeue_cap_ms=300,
                      queued_ttl_ms=400)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None
    wait_until(lambda: chat_id in store.recovery.due_chats(), 2, "the claim TTL to pass")
    assert store.recovery.recover(chat_id, may_requeue=False) == ("requeue", turn), \
        "a lost publish heals behind a backlog too"
    for _ in range(4):  # well past the queued TTL
        wait_until(lambda: chat_id in store.recovery.due_chats(), 2, "the requeue deadline")
        assert store.recovery.recover(chat_id, may_requeue=False) is None
    assert store.lease(chat_id)["state"] == "queued", "the lease is kept while it waits"
    wait_until(lambda: chat_id in store.recovery.due_chats(), 2, "the next deadline")
    assert store.recovery.recover(chat_id, may_requeue=True) == ("requeue", turn), \
        "once nothing waits in the broker it was lost: published again, same fence"


def test_sweepers_split_the_due_chats_between_them() -> None:
    """A batch of due chats goes to one sweeper; the next sweeper gets the
    rest, never the same chats (until the first one's claim ran out)."""
    server = start_redis()  # of its own: only these chats are due there
    redis_client = redis.Redis.from_url(server.url, decode_responses=True)
    store = store_for(redis_client, claim_ttl_ms=50)
    chats = [f"oc_split_{n}" for n in range(10)]
    for n, chat in enumerate(chats):
        store.inbox.ingest(msg(chat, n))
    wait_until(lambda: len(store.recovery.due_chats(20)) == 10, 3, "every claim TTL to pass")
    first = store.recovery.due_chats(6, claim_ms=5000)
    second = store.recovery.due_chats(6, claim_ms=5000)
    assert len(first) == 6 and len(second) == 4 and not set(first) & set(second)
    assert store.recovery.due_chats(6, claim_ms=5000) == [], "each chat is taken once"
    found = store.recovery.recover_many(first + second)
    assert sorted(found) == sorted(chats)
    assert all(kind == "requeue" for kind, _ in found.values()), "published again"
    redis_client.close()
    stop_redis(server)


def test_a_running_turns_heartbeat_keeps_its_chat_out_of_the_due_set(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, running_ttl_ms=300)
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert turn is not None and store.turns.start(turn, "t", "w") is not None
    deadline = time.monotonic() + 1.2  # four lease TTLs
    while time.monotonic() < deadline:
        assert store.turns.heartbeat([turn]) == ["held"]
        assert chat_id not in store.recovery.due_chats(), "no sweeper needs to look at it"
        time.sleep(0.05)
    assert store.turns.heartbeat([turn], [False]) == ["held"], "a check alone extends nothing"
    wait_until(lambda: chat_id in store.recovery.due_chats(), 2,
               "the chat to be due once beats stop")


def test_a_control_job_a_dead_desk_took_is_adopted_by_another(
        redis_client: redis.Redis, chat_id: str) -> None:
    """The ingest step records a /stop in the control stream; a desk that took it and died
    leaves it pending; another desk adopts it once it was idle long enough, and done()
    removes it for good."""
    store = store_for(redis_client)
    dead = ControlJobs(redis_client, "desk-dead", orphan_after_ms=100)
    alive = ControlJobs(redis_client, "desk-alive", orphan_after_ms=100)
    dead.ensure_group()
    alive.ensure_group()
    assert store.inbox.ingest(msg(chat_id, 1, text="/stop"), "stop").outcome == "command"
    taken = [job for job in dead.read(10, 100) if job.chat_id == chat_id]
    assert len(taken) == 1 and taken[0].command == "stop"
    assert alive.read(10, 50) == [], "a job is delivered to one desk"
    adopted = wait_until(lambda: [j for j in alive.orphans(10) if j.chat_id == chat_id], 3,
                         "the job to be adopted")
    assert isinstance(adopted, list) and [j.job_id for j in adopted] == [taken[0].job_id]
    alive.done(adopted[0].job_id)
    assert [j for j in alive.orphans(10) if j.chat_id == chat_id] == []


def test_a_process_with_another_key_layout_is_refused(redis_client: redis.Redis) -> None:
    """Changing GATEWAY_STATE_SHARDS (or one Redis vs a cluster) moves every chat's keys:
    a process whose layout differs from the recorded one must not start."""
    store_for(redis_client).claim_keyspace()  # one Redis: recorded as 0 (or already was)
    store_for(redis_client).claim_keyspace()  # the same layout again: fine
    other = ChatStore(redis_client, StoreConfig(), Keyspace(16))
    with pytest.raises(SettingsError, match="GATEWAY_STATE_SHARDS=0 .* this process has 16"):
        other.claim_keyspace()


def test_a_message_right_after_new_belongs_to_the_new_conversation(
        redis_client: redis.Redis, chat_id: str) -> None:
    """/new renews the session in the step that admits it, not later on a control desk:
    a message the user sends right after it is never answered in the old conversation."""
    store = store_for(redis_client, inbox_cap=10)
    before = store.inbox.ingest(msg(chat_id, 1)).claimed
    assert before is not None
    old = store.turns.start(before, "t", "w")
    assert old is not None and store.turns.complete(before).outcome == "idle"
    assert store.inbox.ingest(msg(chat_id, 2, text="/new"), "new").outcome == "command"
    after = store.inbox.ingest(msg(chat_id, 3)).claimed
    assert after is not None
    new = store.turns.start(after, "t", "w")
    assert new is not None and new.generation > old.generation


def test_each_mark_says_which_process_started_the_session_s_previous_turn(
        redis_client: redis.Redis, chat_id: str) -> None:
    """What the agent caches need to know an agent missed a turn: kept per session, so a
    turn of one user's session in a group says nothing about another's."""
    one, two = (ChatStore(redis_client, StoreConfig(ran_ttl_ms=60_000), runner=name)
                for name in ("w1:1:aa", "w2:7:bb"))
    a, b = f"{chat_id}/ou_a#0", f"{chat_id}/ou_b#0"
    assert one.turns.mark_runner(chat_id, a) == "", "nobody ran one before"
    assert two.turns.mark_runner(chat_id, a) == "w1:1:aa"
    assert one.turns.mark_runner(chat_id, b) == ""
    assert one.turns.mark_runner(chat_id, a) == "w2:7:bb", "B's turn on w1 says nothing of A's"
    assert two.turns.mark_runner(chat_id, b) == "w1:1:aa"
    runners = one.keys(chat_id).runners
    assert runners.startswith(f"gw:{{{chat_id}}}:"), "in the chat's hash slot"
    assert 0 < redis_client.pttl(runners) <= 60_000, "the marks expire"


def test_a_chat_keeps_the_marks_of_its_latest_sessions_only(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = ChatStore(redis_client, StoreConfig(ran_cap=4), runner="w1:1:aa")
    sessions = [f"{chat_id}/ou_{n}#0" for n in range(5)]
    for session in sessions:
        store.turns.mark_runner(chat_id, session)
        wait_for_next_ms(redis_client)
    assert set(redis_client.hkeys(store.keys(chat_id).runners)) == set(sessions[-3:]), \
        "past the cap, the oldest go, down to half of it, and the newest stays"
    assert store.turns.mark_runner(chat_id, sessions[0]) == "", "forgotten: its agent is rebuilt"
    assert store.turns.mark_runner(chat_id, sessions[-1]) == "w1:1:aa"

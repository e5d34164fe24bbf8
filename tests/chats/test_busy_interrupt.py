"""Busy mode interrupt in the chat's scripts against a real redis-server: a message for a
running turn asks the control desk to stop it, the stopped turn's messages are kept and the
next turn answers them with the new ones; after a timeout, a lease that ran out, /stop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from gateway.chats.history import read_history
from gateway.chats.jobs import parse_job
from gateway.chats.keys import CONTROL_KEY
from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, TurnRef
from gateway.ops.embedded_redis import EmbeddedRedis
from tests.support.rig import client_of
from tests.support.store import lease_gone, msg, pending_ids, started, store_for


@pytest.fixture
def redis_client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


def interrupting(client: redis.Redis, **overrides: int) -> ChatStore:
    return store_for(client, **{"inbox_cap": 10, "merge_window_ms": 100, **overrides})


def admit(store: ChatStore, chat_id: str, n: int) -> TurnRef | None:
    return store.inbox.ingest(msg(chat_id, n, create_ms=n * 1000), busy="interrupt").claimed


def interrupts(client: redis.Redis, chat_id: str) -> list[str]:
    """The fences of the interrupt jobs written for the chat."""
    jobs = [parse_job(i, f) for i, f in client.xrange(CONTROL_KEY) or ()]
    return [j.target for j in jobs if j.kind == "interrupt" and j.chat_id == chat_id]


def interrupt(store: ChatStore, chat_id: str, n: int) -> str:
    step = store.cancels.cancel(chat_id, f"interrupt:om_{n}", debounce_ms=0, flag_ttl_ms=60_000,
                        target_fence=interrupts(store.redis, chat_id)[-1],
                        interrupt=f"om_{n}")
    return step.how


def test_a_message_for_a_running_turn_stops_it_and_the_next_turn_answers_both(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).message_id == "om_1"
    assert admit(store, chat_id, 2) is None
    assert interrupts(redis_client, chat_id) == [str(turn.fence)]
    assert interrupt(store, chat_id, 2) == "running"
    assert store.turns.heartbeat([turn]) == ["stopped"] and store.turns.interrupted(turn)
    admit(store, chat_id, 3)  # asked to stop already: no second job
    assert interrupts(redis_client, chat_id) == [str(turn.fence)]
    following = store.turns.complete(turn, outcome="stopped").following
    assert following is not None and following.message_id == "om_1"
    assert pending_ids(store, chat_id) == ["om_1", "om_2", "om_3"], "nothing said is lost"
    rerun = started(store, following)
    assert rerun.attempt == 1 and rerun.merged_ids == ("om_1", "om_2", "om_3")
    assert not store.turns.interrupted(following)
    assert store.turns.complete(following, outcome="replied").outcome == "idle"
    outcomes = [(r.message_id, r.outcome) for r in read_history(redis_client,
                                                                store.keys(chat_id))]
    assert outcomes[:3] == [("om_3", "replied"), ("om_2", "replied"), ("om_1", "replied")]
    assert ("om_1", "interrupted") in outcomes


def test_a_turn_sending_its_kept_answer_or_not_running_is_not_interrupted(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None
    admit(store, chat_id, 2)  # the turn has not started: the message joins it
    assert interrupts(redis_client, chat_id) == []
    assert started(store, turn).merged_ids == ("om_1", "om_2")
    assert store.turns.keep_answer(turn, Answer("reply", ("done",)))
    admit(store, chat_id, 3)
    assert interrupts(redis_client, chat_id) == [], "an answer being sent goes out whole"


def test_an_interrupted_turn_ignoring_the_flag_is_completed_after_the_timeout(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn) is not None
    admit(store, chat_id, 2)
    assert interrupt(store, chat_id, 2) == "running"
    # the desk's timeout path: it completes the turn under its fence, as for /stop
    following = store.turns.complete(turn, outcome="stopped").following
    assert following is not None and pending_ids(store, chat_id) == ["om_1", "om_2"]
    assert store.turns.keep_answer(turn, Answer("reply", ("late",))) is False


def test_an_interrupted_turn_whose_lease_ran_out_keeps_its_messages(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client, running_ttl_ms=200, stop_hold_ms=400)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn) is not None
    admit(store, chat_id, 2)
    assert interrupt(store, chat_id, 2) == "running"
    lease_gone(store, chat_id)  # the worker and the desk died
    found = store.recovery.recover(chat_id)
    assert found is not None and found[0] == "claimed"
    again = started(store, found[1])
    assert again.attempt == 1 and again.merged_ids == ("om_1", "om_2")


def test_stop_in_interrupt_mode_drops_the_running_turn(redis_client: redis.Redis,
                                                      chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn) is not None
    step = store.cancels.cancel(chat_id, "stop", debounce_ms=0, flag_ttl_ms=60_000)
    assert step.how == "running" and not store.turns.interrupted(turn)
    assert store.turns.complete(turn, outcome="stopped").outcome == "idle"
    assert pending_ids(store, chat_id) == []


def test_an_interrupt_never_undoes_a_withdraw_that_came_first(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).message_id == "om_1"
    assert admit(store, chat_id, 2) is None  # the interrupt job waits for the desk
    assert store.changes.withdraw(chat_id, "om_1").how == "stopping"
    assert interrupt(store, chat_id, 2) == "nothing", "the withdraw's stop stands"
    assert not store.turns.interrupted(turn)
    following = store.turns.complete(turn, outcome="stopped").following
    assert following is not None and following.message_id == "om_2"
    rerun = started(store, following)
    assert rerun.message_id == "om_2" and "om_1" not in rerun.merged_ids, "never runs"
    latest: dict[str, str] = {}
    for record in read_history(redis_client, store.keys(chat_id)):  # newest first
        latest.setdefault(record.message_id, record.outcome)
    assert latest == {"om_1": "withdrawn"}


def test_an_interrupt_whose_message_was_withdrawn_first_leaves_the_turn_running(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).message_id == "om_1"
    assert admit(store, chat_id, 2) is None  # the interrupt job waits for the desk
    assert store.changes.withdraw(chat_id, "om_2").how == "dropped"
    assert interrupt(store, chat_id, 2) == "nothing", "nothing new waits to be answered"
    assert store.turns.heartbeat([turn]) != ["stopped"] and not store.turns.interrupted(turn)
    assert store.turns.complete(turn, outcome="replied").following is None
    assert pending_ids(store, chat_id) == []


def test_an_interrupt_after_the_answer_was_written_lets_the_turn_end_as_it_is(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).message_id == "om_1"
    assert admit(store, chat_id, 2) is None  # the interrupt job waits for the desk
    assert store.turns.keep_answer(turn, Answer("reply", ("the answer",)))
    assert interrupt(store, chat_id, 2) == "nothing"
    following = store.turns.complete(turn, outcome="replied").following
    assert following is not None and following.message_id == "om_2"
    rerun = started(store, following)
    assert rerun.message_id == "om_2" and "om_1" not in rerun.merged_ids, "not answered again"


def test_a_stop_after_a_withdraw_keeps_the_withdraw_in_the_history(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).message_id == "om_1"
    assert store.changes.withdraw(chat_id, "om_1").how == "stopping"
    step = store.cancels.cancel(chat_id, "stop-1", debounce_ms=0, flag_ttl_ms=60_000,
                        target_fence=str(turn.fence))
    assert step.how == "running"
    assert store.turns.complete(turn, outcome="stopped").outcome == "idle"
    records = read_history(redis_client, store.keys(chat_id))
    assert [(r.message_id, r.outcome) for r in records] == [("om_1", "withdrawn")]


def test_an_edit_to_a_message_an_interrupt_left_to_the_next_turn_is_taken(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).message_id == "om_1"
    assert admit(store, chat_id, 2) is None
    assert interrupt(store, chat_id, 2) == "running"
    assert store.changes.revise(msg(chat_id, 1, text="first, edited"), 5000) == "revised"
    following = store.turns.complete(turn, outcome="stopped").following
    assert following is not None
    rerun = started(store, following)
    assert [m.text for m in rerun.merged] == ["first, edited", "text 2"]


def test_a_stop_click_on_the_interrupted_turns_card_drops_only_what_was_sent_before_it(
        redis_client: redis.Redis, chat_id: str) -> None:
    """The turn of om_1 was interrupted by om_2; the next turn (of om_1 again, with om_2)
    waits in its merge window when the user clicks Stop on om_1's card (at 2.5 s); om_3,
    sent after the click, is admitted before the desk ends the turn: it is kept and
    answered next, as after a /stop, never dropped with the rest."""
    store = interrupting(redis_client)
    turn = admit(store, chat_id, 1)
    assert turn is not None and started(store, turn).message_id == "om_1"
    admit(store, chat_id, 2)
    assert interrupt(store, chat_id, 2) == "running"
    following = store.turns.complete(turn, outcome="stopped").following  # (not started: waiting)
    assert following is not None and following.message_id == "om_1"
    click = store.clicks.click_stop(chat_id, "om_1", "ou_u", "tok", sent_ms=2500)
    assert click.outcome == "stopping" and click.fence == following.fence
    admit(store, chat_id, 3)  # (sent at 3 s)
    [job] = [j for j in (parse_job(i, f) for i, f in redis_client.xrange(CONTROL_KEY) or ())
             if j.kind == "click-stop" and j.chat_id == chat_id]
    step = store.cancels.cancel(chat_id, f"click:{job.task}", debounce_ms=0, flag_ttl_ms=60_000,
                        target_fence=job.target, sent_ms=job.sent_ms)
    assert step.how == "not-started"
    assert pending_ids(store, chat_id) == ["om_3"], "sent after the click: kept"
    assert step.following is not None and step.following.message_id == "om_3"

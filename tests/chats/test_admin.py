"""The operator's state changes against a real redis-server: a chat's history of finished
turns, purge and retry (lua/include/history.lua, lua/purge.lua, lua/retry.lua)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from gateway.chats import admin
from gateway.chats.cancel import Canceller, CancelResult, How, Stopping
from gateway.chats.history import read_history
from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from tests.support.rig import client_of
from tests.support.store import first_turn, lease_gone, msg, pending_ids, store_for


@pytest.fixture
def redis_client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


def run_to_end(store: ChatStore, turn: TurnRef, outcome: str) -> TurnRef | None:
    assert store.turns.start(turn, f"task-{turn.message_id}", "w1") is not None
    completion = store.turns.complete(turn, outcome=outcome)
    assert completion.outcome != "stale"
    return completion.following


def test_finished_turns_are_kept_newest_first_with_the_message_only_when_retryable(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, history_cap=2)
    turn: TurnRef | None = first_turn(store, chat_id, 3)
    assert turn is not None
    turn = run_to_end(store, turn, "replied")
    assert turn is not None
    turn = run_to_end(store, turn, "failed")
    assert turn is not None
    assert run_to_end(store, turn, "silent") is None
    history = read_history(redis_client, store.keys(chat_id))
    assert [(r.message_id, r.outcome) for r in history] == [("om_3", "silent"),
                                                            ("om_2", "failed")], "capped at 2"
    assert history[1].task_id == "task-om_2" and history[1].attempts == 1
    assert history[1].message is not None and history[1].message.text == "text 2"
    assert history[0].entry == "", "an answered turn keeps no message"
    assert 0 < redis_client.pttl(store.keys(chat_id).done) <= store.config.history_ttl_ms


def test_a_stop_before_the_turn_started_is_recorded_as_stopped(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    store.inbox.ingest(msg(chat_id, 1))
    step = store.cancels.cancel(chat_id, "cmd-1", debounce_ms=0, flag_ttl_ms=60_000)
    assert step.how == "not-started"
    [record] = read_history(redis_client, store.keys(chat_id))
    assert (record.message_id, record.outcome) == ("om_1", "stopped")


def test_retry_refuses_unknown_and_answered_messages(redis_client: redis.Redis,
                                                     chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id)
    run_to_end(store, turn, "replied")
    assert admin.retry(store, chat_id, "om_404").how == "unknown"
    answered = admin.retry(store, chat_id, "om_1")
    assert (answered.how, answered.outcome) == ("answered", "replied")
    assert pending_ids(store, chat_id) == []


def test_a_retried_message_waits_behind_the_chat_and_runs_once_with_new_uuids(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, 2)
    following = run_to_end(store, turn, "failed")
    assert following is not None and following.message_id == "om_2"
    store.inbox.ingest(msg(chat_id, 3))
    result = admin.retry(store, chat_id, "om_1")
    assert (result.how, result.waiting, result.following) == ("queued", 2, None)
    assert pending_ids(store, chat_id) == ["om_2", "om_3", "om_1"], "at the back, in order"
    assert admin.retry(store, chat_id, "om_1").how == "waiting", "never twice at once"
    after: TurnRef | None = run_to_end(store, following, "replied")
    assert after is not None
    after = run_to_end(store, after, "replied")
    assert after is not None and after.message_id == "om_1"
    started = store.turns.start(after, "task-retry", "w1")
    assert started is not None and started.message is not None
    assert started.message.retry == 1 and started.message.reply_key != "om_1"
    assert store.turns.complete(after, outcome="replied").outcome == "idle"
    assert admin.retry(store, chat_id, "om_1").how == "answered"


def test_a_retry_in_an_idle_chat_claims_a_turn_to_publish(redis_client: redis.Redis,
                                                          chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id)
    run_to_end(store, turn, "gave-up")
    result = admin.retry(store, chat_id, "om_1")
    assert result.how == "claimed" and result.following is not None
    assert result.following.message_id == "om_1" and store.turns.holds(result.following)


def test_purge_drops_what_waits_but_never_the_message_the_turn_holds(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, inbox_cap=10)
    turn = first_turn(store, chat_id, 3)
    assert store.turns.start(turn, "t", "w") is not None
    shown = store.pending_entries(chat_id)
    store.inbox.ingest(msg(chat_id, 4))  # arrived after the operator looked: it stays
    assert admin.purge(store, chat_id, shown) == (2, True)
    assert pending_ids(store, chat_id) == ["om_1", "om_4"]
    following = store.turns.complete(turn, outcome="replied").following
    assert following is not None
    assert following.message_id == "om_4"


def test_purge_keeps_the_message_of_a_crashed_turn_until_the_sweeper_runs_it_again(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client, inbox_cap=10, running_ttl_ms=200)
    turn = first_turn(store, chat_id, 3)
    assert store.turns.start(turn, "t", "w") is not None  # then its worker dies: no heartbeat
    lease_gone(store, chat_id)
    assert admin.purge(store, chat_id, store.pending_entries(chat_id)) == (2, True)
    assert pending_ids(store, chat_id) == ["om_1"]
    again = store.recovery.recover(chat_id)
    assert again is not None and again[1].message_id == "om_1"


def test_known_tells_a_chat_redis_remembers_from_a_typo(redis_client: redis.Redis,
                                                       chat_id: str) -> None:
    store = store_for(redis_client)
    assert not admin.known(store, chat_id)
    turn = first_turn(store, chat_id)
    run_to_end(store, turn, "replied")
    assert admin.known(store, chat_id), "an idle chat is known by its fence and history"


def test_a_retry_built_from_an_older_record_is_refused_and_read_again(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id)
    run_to_end(store, turn, "failed")
    keys = [store.keys(chat_id).done]
    again = msg(chat_id, 1).to_json()
    reply = store.run_script("retry", chat_id, ["om_1", chat_id, "not-the-record's-fence",
                                                again, store.options("retry")],
                             more_keys=keys)
    assert reply == [b"changed"] or reply == ["changed"]
    assert pending_ids(store, chat_id) == []


def test_a_retry_goes_behind_messages_stamped_by_a_clock_that_runs_ahead(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id)
    following = run_to_end(store, turn, "failed")
    assert following is None
    ahead = store.inbox.ingest(msg(chat_id, 2, create_ms=store.server_ms() + 3_600_000)).claimed
    assert ahead is not None
    assert admin.retry(store, chat_id, "om_1").how == "queued"
    assert pending_ids(store, chat_id) == ["om_2", "om_1"]


def test_a_stopped_turn_whose_lease_ran_out_never_runs_again_when_a_message_comes(
        redis_client: redis.Redis, chat_id: str) -> None:
    """Its worker and its canceller both died: the next message (or a retry) that finds the
    chat without a lease must drop the stopped message, as the sweeper would."""
    store = store_for(redis_client, running_ttl_ms=300, stop_hold_ms=500)
    turn = first_turn(store, chat_id)
    assert store.turns.start(turn, "t", "w") is not None
    assert store.cancels.cancel(chat_id, "cmd", debounce_ms=0, flag_ttl_ms=60_000).how == "running"
    lease_gone(store, chat_id)
    admission = store.inbox.ingest(msg(chat_id, 2))
    assert admission.claimed is not None and admission.claimed.message_id == "om_2"
    assert pending_ids(store, chat_id) == ["om_2"]


def test_a_stop_before_the_start_lets_the_chat_go_on_even_when_the_revoke_fails(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    first_turn(store, chat_id)
    assert store.lease(chat_id)["state"] == "queued"  # published, not started
    store.inbox.ingest(msg(chat_id, 2))
    published: list[TurnRef] = []

    def broker_down(task_id: str, terminate: bool) -> None:
        raise ConnectionError("broker down")

    canceller = Canceller(store, published.append, broker_down,
                          timeout_s=1, lease_ttl_ms=5000, debounce_s=0)
    with pytest.raises(ConnectionError):
        canceller.cancel(chat_id, "cmd-1")
    assert [t.message_id for t in published] == ["om_2"]


def test_a_stop_debounced_while_another_turn_runs_says_how_to_stop_that_one(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    first_turn(store, chat_id, 3)
    canceller = Canceller(store, lambda t: None, lambda t, k: None, timeout_s=1,
                          lease_ttl_ms=5000, debounce_s=5)
    stopped = canceller.begin(chat_id, "cmd-1")  # om_1's turn had not started: om_2's claimed
    assert not isinstance(stopped, Stopping) and stopped.how == "not-started"
    assert store.lease(chat_id)["entry"].split("|")[1] == "om_2"
    debounced = canceller.begin(chat_id, "cmd-2")
    assert not isinstance(debounced, Stopping) and debounced.how == "debounced"
    assert debounced.user_reply() == (
        "The previous turn was just stopped; send /stop again in 5 s to stop the one now "
        "running. 1 waiting message(s) will be answered next.")
    assert pending_ids(store, chat_id) == ["om_2", "om_3"], "nothing more was stopped"


def test_a_stop_debounced_while_the_stopped_turn_ends_says_already_stopped(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    turn = first_turn(store, chat_id, 2)
    assert store.turns.start(turn, "task-1", "w") is not None
    canceller = Canceller(store, lambda t: None, lambda t, k: None, timeout_s=1,
                          lease_ttl_ms=5000, debounce_s=5)
    assert isinstance(canceller.begin(chat_id, "cmd-1"), Stopping)  # flagged, still running
    debounced = canceller.begin(chat_id, "cmd-2")
    assert not isinstance(debounced, Stopping)
    assert debounced.user_reply() == "Already stopped. 1 waiting message(s) will be answered next."


def test_a_turn_older_than_the_retention_cannot_be_retried(redis_client: redis.Redis,
                                                          chat_id: str) -> None:
    store = store_for(redis_client, history_ttl_ms=300)
    turn = first_turn(store, chat_id)
    run_to_end(store, turn, "failed")
    assert read_history(redis_client, store.keys(chat_id))
    wait_until(lambda: not read_history(redis_client, store.keys(chat_id)), 5,
               "the history to expire")
    assert admin.retry(store, chat_id, "om_1").how == "unknown"
    assert pending_ids(store, chat_id) == []


def test_records_of_the_older_layout_are_read_and_retried(redis_client: redis.Redis,
                                                          chat_id: str) -> None:
    """A rolling upgrade: records the previous version wrote (JSON objects) stay readable
    and retryable beside the compact ones."""
    store = store_for(redis_client)
    turn = first_turn(store, chat_id)
    run_to_end(store, turn, "replied")
    old = {"mid": "om_7", "outcome": "failed", "at_ms": "1796000000000",
           "task": "turn:x:om_6:1", "fence": "1", "attempts": 2,
           "entry": msg(chat_id, 7).to_json()}
    redis_client.rpush(store.keys(chat_id).done, json.dumps(old))
    history = read_history(redis_client, store.keys(chat_id))
    assert [(r.message_id, r.outcome, r.task_id) for r in history] == [
        ("om_1", "replied", "task-om_1"),
        ("om_7", "failed", "turn:x:om_6:1")]
    assert admin.retry(store, chat_id, "om_7").how == "claimed"


@pytest.mark.parametrize(("how", "new_session", "pending", "says"), [
    ("cooperative", False, 0, ""),
    ("timeout-fenced", False, 2, "2 waiting message(s) will be answered next."),
    ("cooperative", True, 0, "New conversation started."),
    ("not-started", False, 0, "Stopped."),
    ("nothing", False, 0, "Nothing was running."),
])
def test_a_stop_whose_answer_shows_it_says_only_what_the_answer_cannot(
        how: How, new_session: bool, pending: int, says: str) -> None:
    result = CancelResult("oc_x", how, pending=pending, new_session=new_session)
    assert result.user_reply(shown=True) == says
    assert result.user_reply().startswith(
        "Stopped." if how in ("cooperative", "timeout-fenced", "not-started") else says[:7])


def test_a_stopped_turn_shows_its_stop_when_it_noted_it_or_its_card_is_still_live(
        redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    assert not store.clicks.stop_shown(chat_id, 7)
    store.clicks.note_stop_shown(chat_id, 7)
    assert store.clicks.stop_shown(chat_id, 7) and not store.clicks.stop_shown(chat_id, 8)
    assert 0 < redis_client.pttl(store.keys(chat_id).stop_shown(7)) <= 300_000
    redis_client.sadd(store.keys(chat_id).live_cards, 8)  # a card its dead worker left
    assert store.clicks.stop_shown(chat_id, 8)

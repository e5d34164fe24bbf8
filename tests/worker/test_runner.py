"""The turn runner against a real Redis and the simulator, in this process: what happens
when Redis fails in the middle of a turn."""

from __future__ import annotations

import pytest
import redis
from celery import Celery

from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, StoreConfig, TurnRef
from gateway.chats.turn import TurnSteps
from gateway.core.model import Message
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from tests.support.runner import RecordingSender, runner_for


class TurnsFailingOnce(TurnSteps):
    failures = 1

    def keep_answer(self, turn: TurnRef, answer: Answer) -> bool:
        if self.failures:
            self.failures -= 1
            raise redis.ConnectionError("Redis went away for a moment")
        return super().keep_answer(turn, answer)


class RedisFailsOnce(ChatStore):
    """Our own store, with one fault injected where the turn keeps its answer."""

    def __init__(self, client: redis.Redis, config: StoreConfig) -> None:
        super().__init__(client, config)
        self.turns = self.part(TurnsFailingOnce)


def test_a_redis_failure_in_the_middle_of_a_turn_does_not_drop_its_message(
        private_redis: EmbeddedRedis, simulator: Simulator, chat_id: str) -> None:
    client = redis.Redis.from_url(private_redis.url)
    store = RedisFailsOnce(client, StoreConfig(running_ttl_ms=300))
    app = Celery(broker=private_redis.url)
    runner = runner_for(store, simulator, app)
    message_id = simulator.send_text(chat_id, "hello", deliver=False)
    turn = store.inbox.ingest(Message(message_id, chat_id, "p2p", "ou_u", "text", "hello")).claimed
    assert turn is not None
    with pytest.raises(redis.ConnectionError):
        runner.run(turn, task_id="t1", worker="w")
    assert [m for m, _ in store.pending(chat_id)] == [message_id], "the message is kept"
    assert simulator.sent_messages(chat_id) == []
    wait_until(lambda: not store.lease(chat_id), 5, "the lease to run out")
    found = store.recovery.recover(chat_id)
    assert found is not None
    assert runner.run(found[1], task_id="t2", worker="w") == "replied"
    assert [m.text for m in simulator.sent_messages(chat_id)] == ["echo: hello"]
    assert store.pending(chat_id) == []
    runner.heartbeats.stop()
    runner.replies.api.close()
    app.close()
    client.close()


@pytest.mark.parametrize(("drain_turns", "published"), [(8, 0), (2, 1)])
def test_a_busy_chat_drains_in_one_task_up_to_its_bound(
        private_redis: EmbeddedRedis, simulator: Simulator, chat_id: str,
        drain_turns: int, published: int) -> None:
    """The messages already waiting behind a turn run in the same task, in
    order, each under its own fence; past the bound the next one is published instead."""
    client = redis.Redis.from_url(private_redis.url)
    store = ChatStore(client, StoreConfig())
    app = Celery(broker=private_redis.url)
    sender = RecordingSender(app)
    runner = runner_for(store, simulator, sender, drain_turns=drain_turns, drain_budget_s=30)
    ids = [simulator.send_text(chat_id, f"m{n}", deliver=False) for n in range(3)]
    admissions = [store.inbox.ingest(Message(m, chat_id, "p2p", "ou_u", "text", f"m{n}"))
                  for n, m in enumerate(ids)]
    first = admissions[0].claimed
    assert first is not None
    assert runner.run(first, task_id="t1", worker="w") == "replied"
    answered = drain_turns if published else 3
    texts = [m.text for m in simulator.sent_messages(chat_id)]
    assert texts == [f"echo: m{n}" for n in range(answered)], "in order, each once"
    assert len(sender.sent) == published
    if published:
        assert store.lease(chat_id)["state"] == "queued", "the rest waits in the broker"
    else:
        assert store.pending(chat_id) == [] and not store.lease(chat_id)
    runner.heartbeats.stop()
    runner.replies.api.close()
    app.close()
    client.close()

"""A worker stopped (SIGTERM: Celery's warm shutdown, `docker compose stop`) while a reply
is being retried leaves within the stop grace period: the reply it could not send is handed
back at once, and another worker sends it, once, when the open API recovers. A running
agent is asked to stop (`turn.cancelled()`): a cooperative one ends at once, its turn is
handed back, and its streaming card says another worker answers there."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from celery import Celery

from gateway.agents.cache import AgentCache
from gateway.chats.keys import ChatKeys
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig, TurnRef
from gateway.core.model import AgentContext, Message, Turn
from gateway.feishu.outbound.delivery import reply_uuid
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.worker.sending import HANDED_OVER_NOTE
from gateway.worker.turn_runner import TurnRunner
from tests.support.agents import context_for_tests
from tests.support.replies import agent_events, replies_to, started
from tests.support.rig import POOLS, Rig, rig_up
from tests.support.runner import RecordingSender, runner_for

LEASE_TTL_S = 60.0
"""Far longer than the test: the reply can only come in time through the hand-back, never
through the lease running out and a sweep."""
EXIT_WITHIN_S = 10.0
"""Well inside compose's stop_grace_period (60 s); the reply budget here is 120 s."""


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, start="listener",  # each test starts its own workers
                GATEWAY_LEASE_TTL_S=str(LEASE_TTL_S), GATEWAY_REPLY_RETRY_BUDGET_S="120") as rig:
        yield rig


@pytest.mark.parametrize("worker_pool", POOLS)
def test_a_worker_stopped_while_retrying_a_reply_leaves_at_once_and_another_sends_it(
        rig: Rig, worker_pool: str, chat_id: str) -> None:
    sim, client = rig.sim, rig.client()
    leaving = rig.fleet("worker", concurrency=1, pool=worker_pool)
    message_id = sim.send_text(chat_id, "answer me through the outage", deliver=False)
    piece = reply_uuid(message_id)
    sim.fail_uuid(piece, "5xx-json")
    try:
        sim.deliver_held(message_id)
        wait_until(lambda: sim.send_attempts(piece) >= 2, 20, "the reply to be retried")
        leaving.process.send_signal(signal.SIGTERM)
        wait_until(lambda: not leaving.alive, EXIT_WITHIN_S,
                   "the stopped worker to exit within the grace period")
        assert leaving.process.returncode == 0, "a warm shutdown, not a kill"
        assert message_id not in replies_to(sim, chat_id)
    finally:
        sim.fail_uuid(piece, None)
    taking_over = rig.fleet("worker", concurrency=1, pool=worker_pool)
    try:
        wait_until(lambda: message_id in replies_to(sim, chat_id), 10,
                   "the reply, sent by the next worker")
        assert replies_to(sim, chat_id)[message_id] == ["echo: answer me through the outage"]
        starts = [e for e in agent_events(client, chat_id) if e["event"] == "start"]
        assert len(starts) == 1, "the kept answer was resent; the agent was not asked again"
        assert "handed back" in leaving.log()
    finally:
        taking_over.stop()


def test_a_reply_begun_while_the_worker_leaves_gets_one_attempt_then_is_handed_back(
        private_redis: EmbeddedRedis, simulator: Simulator, chat_id: str) -> None:
    """A turn whose agent ends after the shutdown began (a warm shutdown waits for it):
    its reply is tried once, never retried; then the turn is published again at once,
    and the next worker resends the kept answer."""
    client = redis.Redis.from_url(private_redis.url)
    store = ChatStore(client, StoreConfig(running_ttl_ms=int(LEASE_TTL_S * 1000)))
    app = Celery(broker=private_redis.url)
    sender = RecordingSender(app)
    leaving, next_one = (runner_for(store, simulator, sender) for _ in range(2))
    message_id = simulator.send_text(chat_id, "hello", deliver=False)
    simulator.fail_uuid(reply_uuid(message_id), "5xx-json")
    turn = store.inbox.ingest(Message(message_id, chat_id, "p2p", "ou_u", "text", "hello")).claimed
    assert turn is not None
    leaving.leave()
    assert leaving.run(turn, task_id="t1", worker="w1") == "handed-back"
    assert simulator.send_attempts(reply_uuid(message_id)) == 1, "tried once, not retried"
    assert len(sender.sent) == 1, "published again at once, not after the lease ran out"
    lease = store.lease(chat_id)
    assert lease["state"] == "queued" and lease["message_id"] == message_id
    simulator.fail_uuid(reply_uuid(message_id), None)
    again = TurnRef(chat_id, message_id, int(lease["fence"]))
    assert next_one.run(again, task_id="t2", worker="w2") == "resent"
    assert [m.text for m in simulator.sent_messages(chat_id)] == ["echo: hello"]
    assert store.pending(chat_id) == [] and not store.lease(chat_id)
    for runner in (leaving, next_one):
        runner.heartbeats.stop()
        runner.replies.api.close()
    app.close()
    client.close()


@pytest.mark.parametrize(("lease_ttl_s", "works_on_s"), [(LEASE_TTL_S, 0.0), (1.0, 2.5)])
def test_a_worker_that_begins_to_leave_during_a_turn_starts_no_further_turn_of_its_chat(
        private_redis: EmbeddedRedis, simulator: Simulator, chat_id: str,
        lease_ttl_s: float, works_on_s: float) -> None:
    """The shutdown begins while the agent runs, and it never looks at `turn.cancelled()`:
    it is waited for (its lease kept, however long it works on) and its whole answer sent;
    the message that waited behind it is published for another worker instead of run here
    (a warm shutdown would otherwise wait for a whole further turn)."""
    client = redis.Redis.from_url(private_redis.url)
    store = ChatStore(client, StoreConfig(running_ttl_ms=int(lease_ttl_s * 1000)))
    app = Celery(broker=private_redis.url)
    sender = RecordingSender(app)
    runner = runner_for(store, simulator, sender, drain_turns=8, drain_budget_s=60.0)
    answered: list[str] = []

    class LeavesMidTurn:
        def run(self, turn: Turn) -> str:
            runner.leave()  # as SIGTERM's watcher thread would, while the agent runs
            time.sleep(works_on_s)  # (an agent at work, past its lease's TTL)
            answered.append(turn.text)
            return f"answered: {turn.text}"

    runner.agents = AgentCache(lambda _session, _: LeavesMidTurn(), 8,
                               context=context_for_tests(client))
    first = simulator.send_text(chat_id, "first", deliver=False)
    second = simulator.send_text(chat_id, "second", deliver=False)
    turn = store.inbox.ingest(Message(first, chat_id, "p2p", "ou_u", "text", "first")).claimed
    assert turn is not None
    assert store.inbox.ingest(Message(second, chat_id, "p2p", "ou_u", "text", "second")).claimed \
        is None, "the second waits behind the first"
    assert runner.run(turn, task_id="t1", worker="w1") == "replied"
    assert answered == ["first"], "the waiting message was not run by the leaving worker"
    assert [m.text for m in simulator.sent_messages(chat_id)] == ["answered: first"]
    assert len(sender.sent) == 1, "the waiting message was published for another worker"
    assert store.lease(chat_id)["message_id"] == second
    runner.heartbeats.stop()
    runner.replies.api.close()
    app.close()
    client.close()


def test_turns_a_stopped_worker_had_reserved_are_back_in_the_queue_at_once(
        rig: Rig, chat_id: str) -> None:
    """Turns a worker holds reserved (taken from the queue, not started) have no copy in
    Redis's unacked hash: their chats' leases bring them back if the worker dies. Its warm
    shutdown pushes them back to the queue at once, and the next worker answers each once,
    long before a lease (60 s here) could run out."""
    sim, client = rig.sim, rig.client()
    leaving = rig.fleet("worker", concurrency=1, extra=("--prefetch-multiplier", "4"))
    busy_chat = f"{chat_id}_busy"
    busy = sim.send_text(busy_chat, "sleep 12")
    wait_until(lambda: started(client, busy_chat, busy), 20, "the slot to be taken")
    waiting = {f"{chat_id}_{n}": sim.send_text(f"{chat_id}_{n}", f"reserved {n}")
               for n in range(3)}
    wait_until(lambda: client.llen("gateway.turns") == 0 and all(
        client.hget(ChatKeys(c).lease, "state") == "queued" for c in waiting), 10,
        "the worker to reserve every turn (nothing left in the queue, none started)")
    assert client.hlen("unacked") == 0, "no copy of a held turn in Redis"
    leaving.process.send_signal(signal.SIGTERM)
    wait_until(lambda: not leaving.alive, EXIT_WITHIN_S, "the stopped worker to exit")
    assert client.llen("gateway.turns") == 4, "the three reserved and the handed-back one"
    taking_over = rig.fleet("worker", concurrency=2)
    try:
        wait_until(lambda: all(m in replies_to(sim, c) for c, m in waiting.items()), 15,
                   "every reserved turn, answered by the next worker")
        wait_until(lambda: busy in replies_to(sim, busy_chat), 30,
                   "the handed-back turn, run again (nothing left for the next test)")
        for chat, message_id in waiting.items():
            assert replies_to(sim, chat)[message_id] == [f"echo: reserved {chat[-1]}"]
            assert [e["message_id"] for e in agent_events(client, chat)
                    if e["event"] == "start"] == [message_id], "run exactly once"
    finally:
        taking_over.stop()


def test_a_worker_leaving_asks_a_running_agent_to_stop_and_hands_its_turn_back(
        private_redis: EmbeddedRedis, simulator: Simulator, chat_id: str) -> None:
    """The shutdown begins while a cooperative agent works: it sees `turn.cancelled()` and
    ends at once; its partial answer is not sent, the turn goes back for another worker
    (not counted as a failed attempt: GATEWAY_MAX_ATTEMPTS 1 still runs it), which asks
    the agent again and answers once."""
    client = redis.Redis.from_url(private_redis.url)
    store = ChatStore(client, StoreConfig(running_ttl_ms=int(LEASE_TTL_S * 1000),
                                          max_attempts=1))
    app = Celery(broker=private_redis.url)
    sender = RecordingSender(app)
    leaving, next_one = (runner_for(store, simulator, sender) for _ in range(2))
    seen: list[str] = []

    class Cooperative:
        def __init__(self, runner: TurnRunner) -> None:
            self.runner = runner

        def run(self, turn: Turn) -> str:
            if self.runner is leaving:
                leaving.leave()  # as SIGTERM's watcher thread would, while the agent runs
                seen.append(f"cancelled {turn.cancelled()}")
                return "half an ans"
            return f"whole answer to {turn.text}"

    def factory_for(runner: TurnRunner) -> Callable[[str, AgentContext], Cooperative]:
        return lambda _session, _context: Cooperative(runner)

    for runner in (leaving, next_one):
        runner.agents = AgentCache(factory_for(runner), 8, context=context_for_tests(client))
    message_id = simulator.send_text(chat_id, "think hard", deliver=False)
    turn = store.inbox.ingest(Message(message_id, chat_id, "p2p", "ou_u", "text",
                                "think hard")).claimed
    assert turn is not None
    assert leaving.run(turn, task_id="t1", worker="w1") == "handed-back"
    assert seen == ["cancelled True"], "the agent was asked to stop at once"
    assert simulator.sent_messages(chat_id) == [], "a partial answer is never sent"
    assert len(sender.sent) == 1, "published again at once"
    lease = store.lease(chat_id)
    again = TurnRef(chat_id, message_id, int(lease["fence"]))
    assert next_one.run(again, task_id="t2", worker="w2") == "replied"
    assert [m.text for m in simulator.sent_messages(chat_id)] == [
        "whole answer to think hard"], "asked again, answered once (not given up)"
    for runner in (leaving, next_one):
        runner.heartbeats.stop()
        runner.replies.api.close()
    app.close()
    client.close()


@pytest.mark.parametrize("again", ["streams", "answers-in-one-piece"])
def test_a_stopped_worker_ends_a_streaming_answer_at_once_and_the_next_one_finishes_it(
        rig: Rig, chat_id: str, again: str) -> None:
    """SIGTERM while an answer streams into its card: the worker leaves at once (not after
    the agent's 8 s), the card says another worker answers there, and the next worker
    takes the same card up and finishes the answer in it (streamed again, or not)."""
    sim = rig.sim
    leaving = rig.fleet("worker", concurrency=1, FEISHU_STREAM_INTERVAL_MS="50")
    asked = sim.send_text(chat_id, "stream 80 0.1" if again == "streams"
                          else "streamonce 80 0.1")
    wait_until(lambda: asked in replies_to(sim, chat_id), 20, "the streaming card")
    [card] = [m for m in sim.sent_messages(chat_id) if m.reply_to == asked]
    wait_until(lambda: "w5" in getattr(sim.card(card.card_id or ""), "text", ""), 20,
               "the answer to grow")
    leaving.process.send_signal(signal.SIGTERM)
    wait_until(lambda: not leaving.alive, 5, "the stopped worker to leave at once")
    assert leaving.process.returncode == 0, "a warm shutdown, not a kill"
    shown = sim.card(card.card_id or "")
    assert shown is not None and HANDED_OVER_NOTE in shown.text, shown
    taking_over = rig.fleet("worker", concurrency=1, FEISHU_STREAM_INTERVAL_MS="50")
    try:
        view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=30)
        assert view.elements["answer"].split() == ([f"w{n}" for n in range(80)]
                                                   if again == "streams"
                                                   else ["plain", "on", "a", "run", "again"])
        assert HANDED_OVER_NOTE not in view.text
        assert [m.message_id for m in sim.sent_messages(chat_id) if m.reply_to == asked] \
            == [card.message_id], "one card, taken up by the next worker"
    finally:
        taking_over.stop()

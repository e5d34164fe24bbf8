"""The chat state on a Redis Cluster: a real cluster of 3 masters made as
`redis-cli --cluster create` makes one; each chat in one of 16 shards, every script in one slot.

The store's steps, the sweeper and the control streams run against the cluster here; then
a listener and a worker keep their chat state on it while Celery's broker is a plain Redis
(`CELERY_BROKER_URL`), and every message of many chats is answered once, in order."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from redis.cluster import RedisCluster

from gateway.chats.jobs import ControlJobs
from gateway.chats.keys import Keyspace
from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, StoreConfig, TurnRef
from gateway.chats.sweeper import sweep_once
from gateway.core.model import Message
from gateway.ops.embedded_redis import EmbeddedCluster
from gateway.ops.processes import wait_until
from tests.support.cli import operator
from tests.support.replies import replies_to
from tests.support.rig import Rig, rig_up
from tests.support.scenarios import stop_then_kill_a_worker

SHARDS = 16


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3) as made:
        yield made


@pytest.fixture
def client(cluster: EmbeddedCluster) -> Iterator[RedisCluster]:
    made = RedisCluster.from_url(cluster.url, decode_responses=True)
    yield made
    made.close()


def store_on(client: RedisCluster, **overrides: int) -> ChatStore:
    options: dict[str, Any] = {"claim_ttl_ms": 5000, "running_ttl_ms": 5000, "inbox_cap": 10,
                               **overrides}
    return ChatStore(cast(redis.Redis, client), StoreConfig(**options), Keyspace(SHARDS))


def msg(chat_id: str, n: int, text: str = "") -> Message:
    return Message(f"om_{chat_id}_{n}", chat_id, "p2p", "ou_u", "text", text or f"text {n}",
                   create_time_ms=1_000 + n)


def chats_of(prefix: str, count: int) -> list[str]:
    return [f"oc_{prefix}_{time.time_ns()}_{n}" for n in range(count)]


def test_every_step_runs_on_a_cluster_and_the_chats_spread_over_its_masters(
        client: RedisCluster) -> None:
    store = store_on(client)
    chats = chats_of("steps", 30)
    heads = {}
    for chat in chats:
        for n in range(3):
            admission = store.inbox.ingest(msg(chat, n))
            if admission.claimed is not None:
                heads[chat] = admission.claimed
    order: dict[str, list[str]] = {chat: [] for chat in chats}
    for chat, turn in heads.items():
        started = store.turns.start(turn, "task", "w")
        assert started is not None
        following: TurnRef | None = turn
        while following is not None:  # one task drains the chat
            order[chat].append(following.message_id)
            assert store.turns.heartbeat([following]) == ["held"]
            assert store.turns.keep_answer(following, Answer("reply", ("ok",)))
            following = store.turns.complete(following, ("task", "w")).following
    assert all(ids == [f"om_{c}_{n}" for n in range(3)] for c, ids in order.items())
    slots = {client.keyslot(store.keys(c).lease) for c in chats}  # type: ignore[no-untyped-call]
    nodes = {client.get_node_from_key(store.keys(c).lease).name  # type: ignore[no-untyped-call]
             for c in chats}
    assert len(slots) > 3 and len(nodes) == 3, "the shards spread over every master"
    assert all(client.zcard(index) == 0 for index in store.keyspace.indexes)
    assert store.recovery.due_chats(100) == []
    store.record_undelivered(chats[0], "om_x", "reply", "HTTP 400")
    assert store.undelivered(chats[0])[0]["message_id"] == "om_x"
    left = [k for k in client.scan_iter(match="gw:{*", count=1000) if client.pttl(k) == -1]
    assert left == [], "no key without a TTL"


def test_running_turns_of_many_shards_beat_in_one_round_trip(client: RedisCluster) -> None:
    store = store_on(client)
    turns = [d for chat in chats_of("beats", 12)
             if (d := store.inbox.ingest(msg(chat, 0)).claimed) is not None]
    for turn in turns:
        assert store.turns.start(turn, "t", "w") is not None
    assert store.turns.heartbeat(turns) == ["held"] * len(turns)
    assert store.turns.holds_many(turns) == [True] * len(turns)
    client.script_flush()  # every master forgot the scripts
    assert store.turns.heartbeat(turns) == ["held"] * len(turns), "NOSCRIPT: loaded and run again"
    step = store.cancels.cancel(turns[0].chat_id, "cmd-1", debounce_ms=0, flag_ttl_ms=5000)
    assert step.how == "running" and step.fence == turns[0].fence
    assert store.turns.heartbeat(turns[:2]) == ["stopped", "held"]


class Recorder:
    """The sweeper's view of the publisher: records what it would publish (the broker is
    not the subject here; the end-to-end test below publishes for real)."""

    def __init__(self) -> None:
        self.published: list[TurnRef] = []

    def publish_many(self, turns: Sequence[TurnRef]) -> int:
        self.published += turns
        return len(turns)

    def backlog(self) -> int | None:
        return 0


def test_a_sweep_recovers_the_due_chats_of_every_shard_once(client: RedisCluster) -> None:
    listener = store_on(client, claim_ttl_ms=100)
    chats = chats_of("sweep", 300)
    for chat in chats:
        assert listener.inbox.ingest(msg(chat, 0)).claimed is not None  # claimed, never published
    store = store_on(client)  # the sweepers' claims outlive the test
    wait_until(lambda: len(store.recovery.due_chats(1000)) >= len(chats), 5,
               "every claim to run out")
    first, second = Recorder(), Recorder()
    sweep_once(store, first, limit=64)  # batches of 4 per shard until no shard is full
    sweep_once(store, second, limit=64)
    recovered = [t.chat_id for t in first.published + second.published]
    assert sorted(recovered) == sorted(chats), "every chat once, by one sweeper or the other"


def test_control_jobs_of_every_shard_reach_one_desk(client: RedisCluster) -> None:
    store = store_on(client)
    jobs = ControlJobs(cast(redis.Redis, client), "desk-1", orphan_after_ms=10_000,
                       streams=Keyspace(SHARDS).controls, poll_ms=10)
    jobs.ensure_group()
    chats = chats_of("desk", 20)
    for chat in chats:
        assert store.inbox.ingest(msg(chat, 0, "/stop"), "stop").outcome == "command"
    taken: list[str] = []
    deadline = time.monotonic() + 5
    while len(taken) < len(chats) and time.monotonic() < deadline:
        for job in jobs.read(100, 200):
            assert job.kind == "command" and job.command == "stop"
            taken.append(job.chat_id)
            jobs.touch([job.job_id])
            jobs.done(job.job_id)
    assert sorted(taken) == sorted(chats)
    assert jobs.read(100, 50) == [] and jobs.orphans(100) == []


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, cluster: EmbeddedCluster) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, start="nothing", kill=True, REDIS_URL=cluster.url,
                GATEWAY_REDIS_CLUSTER="true", GATEWAY_STATE_SHARDS=str(SHARDS)) as rig:
        rig.env["CELERY_BROKER_URL"] = rig.redis.url  # the Rig's own Redis is the broker
        yield rig.up()


def test_a_gateway_on_a_cluster_answers_every_chat_once_in_order(
        rig: Rig, client: RedisCluster) -> None:
    sim = rig.sim
    chats = chats_of("e2e", 8)
    sent = {c: [sim.send_text(c, f"{c[-2:]} n{n}") for n in range(6)] for c in chats}

    def all_answered() -> bool:
        return all(set(ids) <= set(replies_to(sim, c)) for c, ids in sent.items())

    wait_until(all_answered, 60, "every reply")
    for chat, ids in sent.items():
        answered = [m.reply_to for m in sim.sent_messages(chat) if m.reply_to]
        assert answered == ids, "once each, in the order sent"
    store = ChatStore(cast(redis.Redis, client), StoreConfig(), Keyspace(SHARDS))
    wait_until(lambda: not any(store.lease(c) for c in chats), 10, "every chat idle")


def test_stop_a_killed_worker_and_status_work_on_a_cluster(
        rig: Rig, client: RedisCluster, tmp_path: Path) -> None:
    """The control desk reads every shard's stream; the sweepers recover every shard's
    chats; the operator's `chat` reads the chat from its shard."""
    chat = chats_of("stop", 1)[0]

    def status_shows(message_id: str) -> None:
        assert message_id in operator(rig.env, tmp_path, "chat", chat), "chat shows it"

    stop_then_kill_a_worker(rig, cast(redis.Redis, client), chat, status_shows)

"""Opt-in durable ACKs (GATEWAY_DURABLE_ACK): an event is ACKed only once its admission is
on a replica (WAIT) or fsynced to the AOF (WAITAOF, Redis >= 7.2); otherwise Feishu gets a
500 and delivers it again. A Redis that cannot do it stops the listener at start."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from gateway.chats.store import ChatStore
from gateway.chats.store_types import NotDurable, StoreConfig
from gateway.core.model import Message
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from tests.support.replies import replies_to
from tests.support.rig import Rig, rig_up, start_redis, stop_redis
from tests.support.servers import valkey


def replica_of(primary: EmbeddedRedis) -> EmbeddedRedis:
    replica = start_redis(args=["--replicaof", "127.0.0.1", str(primary.port)])
    client = redis.Redis.from_url(primary.url)
    wait_until(lambda: int(client.info("replication").get("connected_slaves", 0)) >= 1 and
               redis.Redis.from_url(replica.url).info("replication").get(
                   "master_link_status") == "up", 20, "the replica to be in sync")
    client.close()
    return replica


@pytest.fixture
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Rig, EmbeddedRedis]]:
    with rig_up(tmp_path_factory, start="nothing", GATEWAY_DURABLE_ACK="replica",
                GATEWAY_DURABLE_ACK_TIMEOUT_MS="300") as rig:
        replica = replica_of(rig.redis)
        try:
            yield rig, replica
        finally:
            stop_redis(replica)


def test_with_a_replica_an_event_is_acked_only_once_it_is_replicated(
        replicated: tuple[Rig, EmbeddedRedis], chat_id: str) -> None:
    rig, replica = replicated
    sim = rig.sim
    rig.fleet("worker")
    rig.fleet("listener")
    sim.wait_connected(1, timeout_s=30)
    first = sim.send_text(chat_id, "replicated")
    wait_until(lambda: first in replies_to(sim, chat_id), 20, "the first reply")
    replica.pause()  # the replica stops acknowledging
    try:
        second = sim.send_text(chat_id, "not yet replicated")
        ack = wait_until(lambda: next((a for a in sim.acks if a.message_id == second), None),
                         10, "the first ACK of the second message")
        assert getattr(ack, "code", None) == 500, "not durable: it must not be ACKed 200"
    finally:
        replica.resume()
    wait_until(lambda: second in replies_to(sim, chat_id), 30, "the reply after redelivery")
    assert replies_to(sim, chat_id)[second] == ["echo: not yet replicated"]


def test_without_a_replica_the_store_refuses_to_call_it_durable(
        redis_server: EmbeddedRedis, chat_id: str) -> None:
    client = redis.Redis.from_url(redis_server.url)
    store = ChatStore(client, StoreConfig(durable_ack="replica", durable_ack_timeout_ms=50))
    with pytest.raises(NotDurable):
        store.inbox.ingest(Message("om_1", chat_id, "p2p", "ou_u", "text", "hi"))
    client.close()


def listen(rig: Rig, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.ops.cli", "listen"],
                          env={**rig.env, "PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=60)


def test_a_redis_that_cannot_make_acks_durable_stops_the_listener_at_start(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with rig_up(tmp_path_factory, start="nothing") as rig:
        result = listen(rig, GATEWAY_DURABLE_ACK="replica")
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1] == (
            "feishu-gateway: GATEWAY_DURABLE_ACK=replica but this Redis has no connected "
            "replica")
        version = str(rig.client().info("server")["redis_version"])
        if tuple(int(p) for p in version.split(".")[:2]) < (7, 2):
            result = listen(rig, GATEWAY_DURABLE_ACK="aof")
            assert result.returncode == 2
            assert result.stderr.strip().splitlines()[-1].startswith(
                "feishu-gateway: GATEWAY_DURABLE_ACK=aof needs Redis >= 7.2 (WAITAOF); this "
                f"server is {version}")
        else:  # WAITAOF exists: the admission waits for the fsync
            client = redis.Redis.from_url(rig.redis.url)
            store = ChatStore(client, StoreConfig(durable_ack="aof"))
            client.config_set("appendonly", "yes")
            hi = Message("om_1", "oc_x", "p2p", "ou", "text", "hi")
            assert store.inbox.ingest(hi).outcome == "claimed"


def test_on_valkey_an_event_is_acked_only_once_its_admission_is_fsynced(
        tmp_path_factory: pytest.TempPathFactory, chat_id: str) -> None:
    """GATEWAY_DURABLE_ACK=aof for real: Valkey 8 has WAITAOF. With the AOF off the
    admission cannot be fsynced: its frame is answered 500, and once the AOF is on again
    Feishu's redelivery is answered, once."""
    with rig_up(tmp_path_factory, start="nothing", persistent=True, server=valkey(),
                GATEWAY_DURABLE_ACK="aof", GATEWAY_DURABLE_ACK_TIMEOUT_MS="300") as rig:
        client = rig.client()
        assert "valkey_version" in client.info("server")
        sim = rig.up().sim
        first = sim.send_text(chat_id, "fsynced")
        wait_until(lambda: first in replies_to(sim, chat_id), 20, "the first reply")
        assert [a.code for a in sim.acks if a.message_id == first] == [200]
        client.config_set("appendonly", "no")
        second = sim.send_text(chat_id, "not on disk")
        ack = wait_until(lambda: next((a for a in sim.acks if a.message_id == second), None),
                         10, "the first ACK of the second message")
        assert getattr(ack, "code", None) == 500, "not durable: it must not be ACKed 200"
        client.config_set("appendonly", "yes")
        wait_until(lambda: second in replies_to(sim, chat_id), 30, "the reply after redelivery")
        assert replies_to(sim, chat_id) == {first: ["echo: fsynced"],
                                            second: ["echo: not on disk"]}
        client.close()

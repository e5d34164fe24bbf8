"""The listener's publishes on a real Redis broker: the turns claimed together go out in one
round trip, in order, each under its own task id; the ones a broker refused are published
again by the sweeper, the same turns."""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from gateway.broker.names import TURNS_QUEUE
from gateway.broker.publisher import Publisher
from gateway.chats.keys import turn_task_id
from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.listener.outbox import Coalescing, Outbox
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from tests.support.store import msg, store_for


@pytest.fixture
def app(private_redis: EmbeddedRedis) -> Iterator[Celery]:
    celery = Celery("publishing-test")
    celery.config_from_object("celeryconfig")
    celery.conf.broker_url = private_redis.url
    yield celery
    celery.close()


def claimed_turns(store: ChatStore, prefix: str, chats: int) -> list[TurnRef]:
    """A turn claimed in each of `chats` new chats `<prefix>_<n>`."""
    turns = [store.inbox.ingest(msg(f"{prefix}_{n}", n)).claimed for n in range(chats)]
    assert all(turns)
    return [turn for turn in turns if turn is not None]


def queued_chats(client: redis.Redis) -> list[str]:
    """The chats of the tasks waiting in the turns queue, oldest first."""
    bodies = client.lrange(TURNS_QUEUE, 0, -1)[::-1]  # (LPUSH: the newest first)
    return [json.loads(base64.b64decode(json.loads(b)["body"]))[1]["chat_id"] for b in bodies]


def test_turns_published_together_arrive_in_order_under_their_own_task_ids(
        client: redis.Redis, app: Celery) -> None:
    store = store_for(client)
    prefix = f"oc_{uuid.uuid4().hex[:8]}"
    turns = claimed_turns(store, prefix, 20)
    assert Publisher(app).publish_many(turns) == 20
    assert queued_chats(client)[-20:] == [f"{prefix}_{n}" for n in range(20)]
    assert all(store.lease(t.chat_id).get("task_id") == turn_task_id(
        t.chat_id, t.message_id, t.fence) for t in turns), "what a /stop revokes"


def test_turns_whose_publish_the_broker_refused_are_published_again_by_the_sweeper(
        client: redis.Redis, app: Celery, caplog: pytest.LogCaptureFixture) -> None:
    store = store_for(client, claim_ttl_ms=300)
    turns = claimed_turns(store, f"oc_{uuid.uuid4().hex[:8]}", 5)
    queued = client.llen(TURNS_QUEUE)
    client.config_set("maxmemory", "1")  # every write is refused (OOM), reads still work
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.broker.publisher"):
            assert Publisher(app).publish_many(turns) == 0
    finally:
        client.config_set("maxmemory", "0")
    assert client.llen(TURNS_QUEUE) == queued
    assert "publishing 5 turns together failed" in caplog.text
    assert caplog.text.count("the sweeper will publish it again") == 5
    wait_until(lambda: all(t.chat_id in store.recovery.due_chats(50) for t in turns), 5,
               "the claim TTL to pass")
    found = store.recovery.recover_many([t.chat_id for t in turns])
    assert found == {t.chat_id: ("requeue", t) for t in turns}, "the same turns, same fences"
    assert Publisher(app).publish_many([t for _, t in found.values()]) == 5
    assert queued_chats(client)[-5:] == [t.chat_id for t in turns]


def test_items_piling_up_while_the_outbox_is_busy_go_out_in_one_call() -> None:
    outbox = Outbox().start()
    calls: list[list[int]] = []
    busy = threading.Event()
    outbox.submit(busy.wait)  # the outbox thread is busy until set
    coalescing: Coalescing[int] = Coalescing(outbox, calls.append, most=4)
    for n in range(6):
        coalescing.submit(n)
    busy.set()
    wait_until(lambda: sum(map(len, calls)) == 6, 5, "every item handled")
    outbox.stop()
    assert calls == [[0, 1, 2, 3], [4, 5]]

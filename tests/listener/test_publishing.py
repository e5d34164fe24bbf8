"""The listener's publishes on a real Redis broker: the turns claimed together go out in one
round trip, in order, each confirmed; a broker that refuses them confirms none."""

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
from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.listener.outbox import Coalescing, Outbox
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from tests.support.rig import client_of
from tests.support.store import msg, store_for


@pytest.fixture
def client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


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


def test_turns_published_together_arrive_in_order_and_are_confirmed(
        client: redis.Redis, app: Celery) -> None:
    store = store_for(client)
    prefix = f"oc_{uuid.uuid4().hex[:8]}"
    turns = claimed_turns(store, prefix, 20)
    assert Publisher(app, store).publish_many(turns) == 20
    assert queued_chats(client)[-20:] == [f"{prefix}_{n}" for n in range(20)]
    assert all(store.lease(t.chat_id).get("state") == "queued" for t in turns)


def test_a_broker_refusing_the_publishes_confirms_none(
        client: redis.Redis, app: Celery, caplog: pytest.LogCaptureFixture) -> None:
    store = store_for(client)
    turns = claimed_turns(store, f"oc_{uuid.uuid4().hex[:8]}", 5)
    queued = client.llen(TURNS_QUEUE)
    client.config_set("maxmemory", "1")  # every write is refused (OOM), reads still work
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.broker.publisher"):
            assert Publisher(app, store).publish_many(turns) == 0
    finally:
        client.config_set("maxmemory", "0")
    assert client.llen(TURNS_QUEUE) == queued
    assert all(store.lease(t.chat_id).get("state") == "claimed" for t in turns)
    assert "publishing 5 turns together failed" in caplog.text
    assert caplog.text.count("the sweeper will publish it again") == 5


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

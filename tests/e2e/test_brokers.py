"""The broker apart from the chat state: Celery on RabbitMQ, which kombu
supports and this machine runs on 127.0.0.1:5672, in a vhost of the test's own; the chat
state stays on its own Redis."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from gateway.ops.processes import wait_until
from tests.support.replies import replies_to
from tests.support.rig import Rig, rig_up
from tests.support.scenarios import stop_then_kill_a_worker

RABBIT = ("127.0.0.1", 5672)


def _rabbitmqctl(*argv: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *argv], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def rabbit_url() -> Iterator[str]:
    try:
        socket.create_connection(RABBIT, timeout=2).close()
    except OSError:
        pytest.skip("no RabbitMQ on 127.0.0.1:5672")
    vhost = f"gw-test-{uuid.uuid4().hex[:8]}"
    _rabbitmqctl("add_vhost", vhost)
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        _rabbitmqctl("delete_vhost", vhost)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, rabbit_url: str) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, kill=True, CELERY_BROKER_URL=rabbit_url) as rig:
        yield rig


def test_turns_go_through_rabbitmq_in_order_and_once(rig: Rig) -> None:
    sim = rig.sim
    chats = [f"oc_rabbit_{n}" for n in range(3)]
    sent = {c: [sim.send_text(c, f"{c} n{n}") for n in range(10)] for c in chats}

    def all_answered() -> bool:
        return all(set(ids) <= set(replies_to(sim, c)) for c, ids in sent.items())

    wait_until(all_answered, 60, "every reply")
    for chat, ids in sent.items():
        replies = replies_to(sim, chat)
        assert [replies[m] for m in ids] == [[f"echo: {chat} n{n}"] for n in range(10)]
        assert [m.reply_to for m in sim.sent_messages(chat)] == ids, "in order, each once"
    client = rig.client()
    assert not client.exists("gateway.turns"), "no turn went through the state Redis"


def test_stop_and_a_killed_worker_work_over_rabbitmq(rig: Rig) -> None:
    """Revoke is a broadcast over the broker; recovery never depends on the broker."""
    stop_then_kill_a_worker(rig, rig.client(), "oc_rabbit_stop")

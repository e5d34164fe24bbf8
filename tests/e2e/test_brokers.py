"""The broker apart from the chat state: Celery on RabbitMQ, which kombu
supports and this machine runs on 127.0.0.1:5672, in a vhost of the test's own; the chat
state stays on its own Redis."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from gateway.ops.processes import wait_until
from tests.conftest import TEST_CANCEL_TIMEOUT_S, Rig
from tests.test_cancel import reply_of, started
from tests.test_pipeline import replies_to

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
    rig = Rig(tmp_path_factory, CELERY_BROKER_URL=rabbit_url)
    yield rig.up()
    rig.close(kill=True)


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


def stop_then_kill_a_worker(rig: Rig, events: redis.Redis, chat: str,
                            while_running: Callable[[str], object] = lambda _: None) -> None:
    """A /stop ends a running turn and the next message is answered; then a worker is
    SIGKILLed mid-turn and the message behind it is answered. `while_running(message_id)`
    runs while the first turn is running."""
    sim = rig.sim
    running = sim.send_text(chat, "sleep 30")
    wait_until(lambda: started(events, chat, running), 20, "the turn to start")
    after = sim.send_text(chat, "after the stop")
    while_running(running)
    stop = sim.send_text(chat, "/stop")
    assert reply_of(sim, chat, stop, TEST_CANCEL_TIMEOUT_S + 10).startswith("Stopped.")
    assert reply_of(sim, chat, after) == "echo: after the stop"
    crashed = sim.send_text(chat, "hang 4")
    wait_until(lambda: started(events, chat, crashed), 20, "the hanging turn to start")
    for worker in rig.fleet.workers():
        worker.kill()  # supervised: started again, as systemd would
    behind = sim.send_text(chat, "behind the crash")
    assert reply_of(sim, chat, behind, 60) == "echo: behind the crash"

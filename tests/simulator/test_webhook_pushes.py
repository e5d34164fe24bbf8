"""The simulator's webhook pushes, as Feishu's: a push the server hangs up on without an
answer is not answered (and counted so, by why); Feishu pushes it again later."""

from __future__ import annotations

import socket
import threading

from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.simulator.webhook import WebhookConfig


def test_a_push_the_server_hangs_up_on_is_counted_unanswered_and_pushed_again() -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def hang_up() -> None:  # reads each request's head, then closes without an answer
        while True:
            try:
                conn, _ = listening.accept()
            except OSError:
                return
            with conn:
                heads.append(conn.recv(65536).split(b"\r\n", 1)[0])

    threading.Thread(target=hang_up, daemon=True).start()
    sim = Simulator(webhook=WebhookConfig(), redelivery_s=(0.5,)).start()
    try:
        sim.set_webhook_urls([f"http://127.0.0.1:{listening.getsockname()[1]}/feishu"])
        message_id = sim.send_text("oc_hung_up", "hello")
        wait_until(lambda: sim.unanswered_pushes.get("disconnected", 0) >= 2, 10,
                   "the push and its redelivery, both hung up on")
        assert sim.unanswered_pushes == {"disconnected": 2}
        assert heads == [b"POST /feishu HTTP/1.1"] * 2
        assert not sim.acks_of(message_id)
    finally:
        sim.stop()
        listening.close()

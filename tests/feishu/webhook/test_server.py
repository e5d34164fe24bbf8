"""The webhook server's lanes: card callbacks have a pool and queue of their own, so a click
is answered at once while events wait for their Redis step, and events past their queue
are answered 503 (Feishu pushes them again)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from gateway.feishu.webhook.server import QUEUE_PER_THREAD, ServerOptions, WebhookServer
from gateway.feishu.webhook.verify import Keys
from gateway.ops.processes import wait_until

TOKEN = "a verification token"


def push(kind: str, n: int) -> bytes:
    return json.dumps({"schema": "2.0", "header": {
        "event_id": f"ev_{kind}_{n}", "event_type": kind, "token": TOKEN,
        "app_id": "cli_app"}, "event": {}}).encode()


class Intake:
    """Stands for the listener's intake: an event's step waits until `release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = 0
        self._guard = threading.Lock()

    def __call__(self, app_id: str, kind: str, payload: bytes) -> Mapping[str, Any] | None:
        event = json.loads(payload)
        if event["header"]["event_type"] == "card.action.trigger":
            return {"toast": {"type": "success", "content": "Stopping…"}}
        with self._guard:
            self.entered += 1
        assert self.release.wait(30)
        return None


@pytest.fixture
def served() -> Iterator[tuple[WebhookServer, Intake]]:
    intake = Intake()
    server = WebhookServer(Keys(TOKEN), ServerOptions("127.0.0.1", 0, "/feishu", 65536, 1),
                           intake, apps=["cli_app"], now_s=lambda: 0.0).start()
    try:
        yield server, intake
    finally:
        intake.release.set()
        server.stop()


def test_a_click_is_answered_while_events_fill_their_queue(
        served: tuple[WebhookServer, Intake]) -> None:
    server, intake = served
    url = f"http://127.0.0.1:{server.port}/feishu"
    queued = 1 + QUEUE_PER_THREAD  # one thread's worth of events: its step and its queue
    with httpx.Client(timeout=30) as client, ThreadPoolExecutor(queued) as pool:
        waiting = [pool.submit(client.post, url, content=push("im.message.receive_v1", n))
                   for n in range(queued)]
        wait_until(lambda: server.events_waiting == queued, 10, "the events to be taken")
        assert intake.entered == 1, "one thread: one event's step at a time"
        assert client.post(url, content=push("im.message.receive_v1", 99)).status_code == 503
        click = client.post(url, content=push("card.action.trigger", 0), timeout=3)
        assert click.status_code == 200
        assert click.json() == {"toast": {"type": "success", "content": "Stopping…"}}
        intake.release.set()
        assert [w.result().status_code for w in waiting] == [200] * queued


def test_an_event_that_cannot_begin_in_time_is_answered_503_and_its_step_skipped() -> None:
    intake = Intake()
    options = ServerOptions("127.0.0.1", 0, "/feishu", 65536, 1, ingest_wait_max_s=0.3)
    server = WebhookServer(Keys(TOKEN), options, intake, apps=["cli_app"],
                           now_s=lambda: 0.0).start()
    url = f"http://127.0.0.1:{server.port}/feishu"
    try:
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, url, content=push("im.message.receive_v1", 0))
            wait_until(lambda: intake.entered == 1, 10, "the first event's step to begin")
            clock = time.monotonic()
            late = client.post(url, content=push("im.message.receive_v1", 1))
            assert late.status_code == 503, "Feishu pushes it again"
            assert 0.3 <= time.monotonic() - clock < 1.5, "answered once its wait was over"
            intake.release.set()
            assert first.result().status_code == 200, "a step that began is waited for"
            after = client.post(url, content=push("im.message.receive_v1", 2))
            assert after.status_code == 200
            assert intake.entered == 2, "the refused event's step never ran"
    finally:
        intake.release.set()
        server.stop()

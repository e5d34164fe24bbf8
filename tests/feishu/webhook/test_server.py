"""The webhook server's lanes: card callbacks have a pool and queue of their own, so a click
is answered at once while events wait for their Redis step, and events past their queue
are answered 503 (Feishu pushes them again)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from gateway.feishu.webhook import server as server_module
from gateway.feishu.webhook.server import QUEUE_PER_THREAD, Keeper, ServerOptions, WebhookServer
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


def message_push(chat: str, n: int) -> bytes:
    return json.dumps({"schema": "2.0", "header": {
        "event_id": f"ev_{chat}_{n}", "event_type": "im.message.receive_v1", "token": TOKEN,
        "app_id": "cli_app"}, "event": {"message": {"chat_id": chat, "message_id": f"om_{n}"}}
    }).encode()


class Ordered:
    """Stands for the intake: records when steps began and pushes were kept, in order; a
    chat's first step waits for `release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.log: list[str] = []
        self._guard = threading.Lock()

    @property
    def began(self) -> list[str]:
        return [entry.removeprefix("began ") for entry in self.log if entry.startswith("began")]

    def __call__(self, app_id: str, kind: str, payload: bytes) -> Mapping[str, Any] | None:
        event = json.loads(payload)["event"]["message"]
        with self._guard:
            self.log.append(f"began {event['chat_id']}/{event['message_id']}")
        if event["message_id"] == "om_0":
            assert self.release.wait(30)
        return None

    def keep(self, app_id: str, payload: bytes) -> None:
        event = json.loads(payload)["event"]["message"]
        with self._guard:
            self.log.append(f"kept {event['chat_id']}/{event['message_id']}")


def ordered_server(intake: Ordered, wait_s: float = 0.0) -> WebhookServer:
    options = ServerOptions("127.0.0.1", 0, "/feishu", 65536, 4, ingest_wait_max_s=wait_s)
    return WebhookServer(Keys(TOKEN), options, intake, apps=["cli_app"], now_s=lambda: 0.0,
                         keeper=Keeper(keep=intake.keep)).start()


def test_pushes_of_one_chat_begin_their_steps_in_the_order_they_came() -> None:
    """Four threads, so both pushes of chat A could run at once: the second waits for the
    first's step, while chat B's goes on."""
    intake = Ordered()
    server = ordered_server(intake)
    url = f"http://127.0.0.1:{server.port}/feishu"
    try:
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(3) as pool:
            first = pool.submit(client.post, url, content=message_push("oc_a", 0))
            wait_until(lambda: intake.began == ["oc_a/om_0"], 10, "the first step")
            second = pool.submit(client.post, url, content=message_push("oc_a", 1))
            wait_until(lambda: server.events_in_line == 1, 10, "the second to come")
            other = client.post(url, content=message_push("oc_b", 2))
            assert other.status_code == 200 and intake.began == ["oc_a/om_0", "oc_b/om_2"]
            assert not second.done(), "behind its chat's first push"
            intake.release.set()
            assert first.result().status_code == second.result().status_code == 200
            assert intake.began == ["oc_a/om_0", "oc_b/om_2", "oc_a/om_1"]
    finally:
        intake.release.set()
        server.stop()


def test_a_push_refused_behind_its_chat_keeps_its_place_in_the_line() -> None:
    """A chat's second push cannot begin within the bound (its first is slow): it is
    answered 503 and kept to take later, and the chat's third push still waits for the
    first, so it is never taken before the second."""
    intake = Ordered()
    server = ordered_server(intake, wait_s=0.3)
    url = f"http://127.0.0.1:{server.port}/feishu"
    try:
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, url, content=message_push("oc_a", 0))
            wait_until(lambda: intake.began == ["oc_a/om_0"], 10, "the first step")
            assert client.post(url, content=message_push("oc_a", 1)).status_code == 503
            third = pool.submit(client.post, url, content=message_push("oc_a", 2))
            wait_until(lambda: server.events_in_line == 1, 10, "the third to come")
            assert intake.log == ["began oc_a/om_0"], "the third waits for the first; the " \
                "second is kept once the first is done"
            intake.release.set()
            assert first.result().status_code == 200
            third.result()
            assert intake.log == ["began oc_a/om_0", "kept oc_a/om_1", "began oc_a/om_2"]
    finally:
        intake.release.set()
        server.stop()


def test_slow_and_stalled_requests_are_bounded_in_number_and_in_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A body is read within READ_TIMEOUT_S (408 after), a connection that sends no request
    head is closed after its keep-alive (FEISHU_WEBHOOK_KEEPALIVE_S), and past
    READ_BUDGET_BYTES of bodies being read at once a push is answered 503 unread: stalled
    strangers pin a bounded amount of memory, for a bounded time."""
    monkeypatch.setattr(server_module, "READ_TIMEOUT_S", 1.0)
    monkeypatch.setattr(server_module, "READ_BUDGET_BYTES", 4 * 60000)
    intake = Intake()
    intake.release.set()
    options = ServerOptions("127.0.0.1", 0, "/feishu", 65536, 1, keepalive_s=1.0)
    server = WebhookServer(Keys(TOKEN), options, intake, apps=["cli_app"],
                           now_s=lambda: 0.0).start()
    head = (b"POST /feishu HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60000\r\n\r\n{\"partial\": ")
    try:
        stalled = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(6)]
        for sock in stalled:
            sock.settimeout(5)
            sock.sendall(head)
        clock = time.monotonic()
        answers = [sock.recv(200).split(b" ", 2)[1] for sock in stalled]
        took_s = time.monotonic() - clock
        assert sorted(answers) == [b"408"] * 4 + [b"503"] * 2, answers
        assert took_s < 3.0, f"answered within the read timeout ({took_s:.1f} s)"
        silent = socket.create_connection(("127.0.0.1", server.port))
        silent.settimeout(5)
        clock = time.monotonic()
        assert silent.recv(100) == b"", "closed"
        assert time.monotonic() - clock < 3.0
        with httpx.Client(timeout=10) as client:  # and the server serves on
            ok = client.post(f"http://127.0.0.1:{server.port}/feishu",
                             content=push("im.message.receive_v1", 1))
            assert ok.status_code == 200
    finally:
        for sock in [*stalled, silent]:
            sock.close()
        server.stop()


def test_a_kept_alive_connection_outlasts_the_senders_idle_pool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Feishu's senders, load balancers and proxies keep a connection after its answer and
    write the next push to it when one comes: the server keeps an idle connection for
    FEISHU_WEBHOOK_KEEPALIVE_S, longer than they keep one, so it never closes one as a push
    is written to it (the push would get no answer, and wait 15 s for Feishu's next try).
    Here the read timeout is 1 s and the connection sits idle 2 s between two pushes."""
    monkeypatch.setattr(server_module, "READ_TIMEOUT_S", 1.0)
    intake = Intake()
    intake.release.set()
    server = WebhookServer(Keys(TOKEN), ServerOptions("127.0.0.1", 0, "/feishu", 65536, 1),
                           intake, apps=["cli_app"], now_s=lambda: 0.0).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.settimeout(5)
            answers = sock.makefile("rb")
            for n in range(2):
                if n:
                    time.sleep(2.0)  # (the idle time is the condition under test)
                body = push("im.message.receive_v1", n)
                sock.sendall(b"POST /feishu HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                status = answers.readline()
                assert status.startswith(b"HTTP/1.1 200"), (n, status)
                length = 0
                while (line := answers.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                answers.read(length)
    finally:
        server.stop()


def test_a_push_refused_unread_is_not_kept_alive(
        served: tuple[WebhookServer, Intake]) -> None:
    """A push answered without its body read (413 over the cap, 503 past the read budget,
    408 too slow) ends its connection: the rest of its body is read and dropped for a
    moment (so its sender sees the answer), then the connection is closed, never kept for
    another request (the answer's `Connection: close` header alone would not do it: aiohttp
    keeps a connection open unless told itself)."""
    server, _ = served
    size = 100_000
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.settimeout(5)
        sock.sendall(b"POST /feishu HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n" % size)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 413"), answer
        assert b"connection: close" in answer.lower()
        sock.sendall(b" " * size)  # the rest of the body comes: still no second request
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(4096):
                pass  # (the answer's body, then the close)

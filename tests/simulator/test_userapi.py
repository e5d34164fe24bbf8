"""The simulator's user side over HTTP (what the web chat and `feishu-gateway simulator
send` use): bad requests, origins and hosts refused, a send no bot can take. (Against a
real listener and worker: e2e/test_simulator_send.py.)"""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import httpx
import pytest

from gateway.feishu.webhook.server import ServerOptions, WebhookServer
from gateway.feishu.webhook.verify import Keys
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator, serve_forever
from gateway.simulator.userapi import local_host

one_pool = pytest.mark.parametrize("pool", ["prefork"], indirect=True)


def test_bad_requests_get_a_clear_400(feishu: Simulator) -> None:
    for body, says in (({"text": "hi"}, "chat_id must be a non-empty string"),
                       ({"chat_id": "oc_x", "text": "hi", "chat_type": "room"},
                        "chat_type must be p2p or group")):
        response = httpx.post(f"{feishu.url}/sim/v1/messages", json=body, timeout=5)
        assert (response.status_code, response.text) == (400, says)
    response = httpx.post(f"{feishu.url}/sim/v1/messages", content=b"{", timeout=5,
                          headers={"Content-Type": "application/json"})
    assert (response.status_code, response.text) == (400, "the body must be JSON")
    assert httpx.get(f"{feishu.url}/sim/v1/messages", timeout=5).status_code == 400


CALLS = (("/sim/v1/messages", {"chat_id": "oc_csrf", "text": "hi"}),
         ("/sim/v1/card_actions", {"chat_id": "oc_csrf", "message_id": "om_x",
                                   "value": {"decision": "once"}}))


def test_a_post_that_is_not_json_is_refused_with_415(simulator: Simulator) -> None:
    """What a cross-site form (or a no-preflight fetch) can send: never delivered."""
    simulator.delivery_timeout_s = 0.3  # a call let through would answer 503 (no bot)
    for path, body in CALLS:
        for headers in ({"Content-Type": "text/plain"},
                        {"Content-Type": "application/x-www-form-urlencoded"}, {}):
            response = httpx.post(f"{simulator.url}{path}", content=json.dumps(body),
                                  headers=headers, timeout=5)
            assert (response.status_code, response.text) == (
                415, "the body must be sent as Content-Type: application/json"), headers


def test_a_post_from_another_origin_is_refused_with_403(simulator: Simulator) -> None:
    host_port = simulator.url.removeprefix("http://")
    port = host_port.rsplit(":", 1)[1]
    simulator.delivery_timeout_s = 0.3  # a call let through would answer 503 (no bot)
    for path, body in CALLS:
        for origin in ("https://evil.example", f"http://evil.example:{port}",
                       f"http://localhost:{port}", "null"):
            response = httpx.post(f"{simulator.url}{path}", json=body, timeout=5,
                                  headers={"Origin": origin})
            assert (response.status_code, response.text) == (
                403, f"a page of another origin ({origin}) cannot post to the simulator"), origin
    same = httpx.post(f"{simulator.url}/sim/v1/messages", json={"text": "hi"}, timeout=5,
                      headers={"Origin": simulator.url})
    assert (same.status_code, same.text) == (400, "chat_id must be a non-empty string"), \
        "the simulator's own page (same origin) passes"


def call(sim: Simulator, host: str, method: str, path: str,
         body: dict[str, Any] | None = None) -> httpx.Response:
    """One call to `sim` with the Host header (and a matching Origin) of `host`."""
    return httpx.request(method, f"{sim.url}{path}", json=body, timeout=5,
                         headers={"Host": host, "Origin": f"http://{host}"})


USER_CALLS = (("GET", "/sim/v1/messages?chat_id=oc_host", None), ("GET", "/", None),
              *(("POST", path, body) for path, body in CALLS))


def test_a_request_for_another_host_is_refused_with_403(simulator: Simulator) -> None:
    """DNS rebinding: a page of evil.example whose name now points at the simulator sends
    same-origin requests, with its own name as their Host."""
    port = simulator.url.rsplit(":", 1)[1]
    simulator.delivery_timeout_s = 0.3  # a call let through would answer 503 (no bot)
    for host in (f"evil.example:{port}", "evil.example", f"localhost.evil.example:{port}",
                 f"127.0.0.1.evil.example:{port}", f"localhost:{port}@evil.example",
                 "localhost:x"):
        for method, path, body in USER_CALLS:
            response = call(simulator, host, method, path, body)
            assert (response.status_code, response.text) == (403, (
                f"host {host} is refused: the simulator answers only for a loopback address "
                "or 127.0.0.1")), (host, method, path)


def test_loopback_hosts_at_any_port_are_served(simulator: Simulator) -> None:
    port = simulator.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "127.3.4.5:8080",
                 "localhost"):
        assert call(simulator, host, "GET", "/sim/v1/messages?chat_id=oc_host").json() == {
            "items": [], "user_messages": [], "reactions": {}}, host
        page = call(simulator, host, "GET", "/")
        assert page.status_code == 200 and "<html" in page.text, host
        posted = call(simulator, host, "POST", "/sim/v1/messages", {"text": "hi"})
        assert (posted.status_code, posted.text) == (
            400, "chat_id must be a non-empty string"), host


def test_the_address_the_simulator_is_bound_to_is_its_host_too() -> None:
    """(Judged without binding anything but loopback: tests listen on nothing else.)"""
    for host in ("10.1.2.3:9900", "10.1.2.3", "localhost:9900", "127.0.0.1", "[::1]:1"):
        assert local_host(host, "10.1.2.3"), host
    for host in ("10.1.2.4:9900", "evil.example:9900", "10.1.2.3.evil.example", "",
                 "10.1.2.3:x", "localhost:9900@evil.example"):
        assert not local_host(host, "10.1.2.3"), host


def test_a_send_no_bot_can_take_is_a_503_with_the_reason(simulator: Simulator) -> None:
    simulator.delivery_timeout_s = 0.3
    for path, body in CALLS:
        response = httpx.post(f"{simulator.url}{path}", json=body, timeout=10,
                              headers={"Origin": simulator.url})
        assert (response.status_code, response.text) == (503, (
            "no bot is connected to this simulator yet: start `feishu-gateway listen` with "
            f"FEISHU_DOMAIN={simulator.url} and FEISHU_APP_ID={simulator.app_id} (the export "
            "lines `feishu-gateway simulator` printed)")), path


def test_the_simulator_prints_lines_to_paste_into_another_terminal() -> None:
    out, stop = io.StringIO(), threading.Event()
    serving = threading.Thread(target=serve_forever, kwargs={
        "port": 0, "stop_event": stop, "out": out}, daemon=True)
    serving.start()
    try:
        wait_until(lambda: "FEISHU_DOMAIN" in out.getvalue(), 10, "the simulator's lines")
        exports = [line for line in out.getvalue().splitlines()
                   if line.startswith("export ")]
        url = exports[-1].removeprefix("export FEISHU_DOMAIN=")
        assert exports == ["export FEISHU_APP_ID=cli_sim_app",
                           "export FEISHU_APP_SECRET=sim-secret",
                           f"export FEISHU_DOMAIN={url}"]
        assert httpx.get(f"{url}/", timeout=5).status_code == 200, "the URL serves"
    finally:
        stop.set()
        serving.join(10)


def test_with_a_webhook_url_the_simulator_pushes_signed_encrypted_events_there() -> None:
    """`feishu-gateway simulator --webhook-url`: the lines to paste carry the token and the
    Encrypt Key, and a message from the web chat reaches a webhook server that holds them."""
    taken: list[dict[str, Any]] = []

    def intake(app_id: str, kind: str, payload: bytes) -> None:
        taken.append(json.loads(payload))

    keys = Keys("to be read from the lines")
    server = WebhookServer(keys, ServerOptions("127.0.0.1", 0, "/feishu", 65536, 2), intake,
                           apps=["cli_sim_app"], now_s=time.time).start()
    out, stop = io.StringIO(), threading.Event()
    serving = threading.Thread(target=serve_forever, kwargs={
        "port": 0, "stop_event": stop, "out": out,
        "webhook_url": f"http://127.0.0.1:{server.port}/feishu"}, daemon=True)
    serving.start()
    try:
        wait_until(lambda: "FEISHU_ENCRYPT_KEY" in out.getvalue(), 10, "the simulator's lines")
        exports = dict(line.removeprefix("export ").split("=", 1)
                       for line in out.getvalue().splitlines() if line.startswith("export "))
        assert "feishu-gateway serve" in out.getvalue()
        server.keys = Keys(exports["FEISHU_VERIFICATION_TOKEN"], exports["FEISHU_ENCRYPT_KEY"])
        url = exports["FEISHU_DOMAIN"]
        sent = httpx.post(f"{url}/sim/v1/messages", json={"chat_id": "oc_web", "text": "hi"},
                          headers={"Origin": url}, timeout=10)
        assert sent.status_code == 200, sent.text
        wait_until(lambda: taken, 10, "the pushed event")
        message = taken[0]["event"]["message"]
        assert (message["chat_id"], json.loads(message["content"])) == ("oc_web", {"text": "hi"})
    finally:
        stop.set()
        serving.join(10)
        server.stop()

"""The simulator's user side over HTTP (what the web chat and `feishu-gateway simulator
send` use), against a real listener and worker."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest

from gateway.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from gateway.simulator.userapi import local_host

one_pool = pytest.mark.parametrize("pool", ["prefork"], indirect=True)


def bot_messages(sim: Simulator, chat_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{sim.url}/sim/v1/messages", params={"chat_id": chat_id}, timeout=5)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert isinstance(items, list)
    return items


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
            "items": [], "reactions": {}}, host
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
        assert response.status_code == 503, response.text
        assert response.text.startswith("not delivered: simulator: no long-connection client")
        assert "\n" not in response.text


@one_pool
def test_a_user_chats_and_clicks_an_approval_card_over_http(
        feishu: Simulator, listener: GatewayProcess, chat_id: str) -> None:
    sent = httpx.post(f"{feishu.url}/sim/v1/messages", timeout=10, json={
        "chat_id": chat_id, "text": "approve 60 tool May I run the tool?"}).json()
    card = wait_until(lambda: next((m for m in bot_messages(feishu, chat_id)
                                    if m["reply_to"] == sent["message_id"]
                                    and m["msg_type"] == "interactive"), None), 30, "the card")
    assert isinstance(card, dict)
    value = next(a["value"] for e in card["content"]["elements"] for a in e.get("actions", ())
                 if a["value"]["decision"] == "once")
    clicked = httpx.post(f"{feishu.url}/sim/v1/card_actions", timeout=10, json={
        "chat_id": chat_id, "message_id": card["message_id"], "value": value})
    assert clicked.status_code == 200 and clicked.json()["frame_id"]
    wait_until(lambda: any(m["text"] == "decision: once" for m in bot_messages(feishu, chat_id)),
               30, "the turn to go on with the decision")


@one_pool
def test_simulator_send_prints_the_bots_reply(feishu: Simulator, listener: GatewayProcess,
                                              chat_id: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "simulator", "send", chat_id, "hello there",
         "--url", feishu.url], capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1,localhost"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "bot: echo: hello there\n"
    gone = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "simulator", "send", chat_id, "x", "--url",
         "http://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert gone.returncode == 2 and gone.stderr.startswith(
        "feishu-gateway: cannot reach the simulator at http://127.0.0.1:1")

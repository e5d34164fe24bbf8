"""The simulator's user side over HTTP (what the web chat and `feishu-gateway simulator
send` use), against a real listener and worker."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from typing import Any

import httpx
import pytest

from gateway.ops.cli import main
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator, serve_forever
from gateway.simulator.userapi import local_host
from tests.conftest import Rig

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
        [sys.executable, "-m", "gateway.ops.cli", "simulator", "send", chat_id, "hello there",
         "--url", feishu.url], capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1,localhost"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "bot: echo: hello there\n"
    gone = subprocess.run(
        [sys.executable, "-m", "gateway.ops.cli", "simulator", "send", chat_id, "x", "--url",
         "http://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert gone.returncode == 2 and gone.stderr.startswith(
        "feishu-gateway: cannot reach the simulator at http://127.0.0.1:1")


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


def send(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`feishu-gateway simulator send ARGV`: its exit code, stdout and stderr."""
    code = main(["simulator", "send", *argv])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def test_simulator_send_says_which_rule_kept_a_group_message_unanswered(
        edge: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    """The edge listener gates group messages on an @mention (the default)."""
    code, out, err = send(capsys, "oc_send_team", "anyone there?", "--group", "--url",
                          edge.sim.url, "--wait", "2")
    assert (code, out) == (1, "")
    assert err == ("feishu-gateway: delivered and acknowledged, but no turn started within "
                   "2s: in a group the bot answers only when @mentioned (--mention) unless "
                   "its listener runs with FEISHU_REQUIRE_MENTION=false\n")
    assert send(capsys, "oc_send_team", "anyone there?", "--group", "--mention", "--url",
                edge.sim.url) == (0, "bot: echo: anyone there?\n", "")


def test_simulator_send_with_no_bot_connected_says_what_to_start(
        simulator: Simulator, capsys: pytest.CaptureFixture[str]) -> None:
    simulator.delivery_timeout_s = 0.3
    assert send(capsys, "oc_alone", "hello?", "--url", simulator.url) == (1, "", (
        "feishu-gateway: not sent: no bot is connected to this simulator yet: start "
        f"`feishu-gateway listen` with FEISHU_DOMAIN={simulator.url} and FEISHU_APP_ID="
        f"{simulator.app_id} (the export lines `feishu-gateway simulator` printed)\n"))

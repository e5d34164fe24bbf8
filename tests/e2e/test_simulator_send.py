"""The simulator's user side against a real listener and worker: a user chats and clicks
an approval card over HTTP, and `feishu-gateway simulator send` prints the bot's reply or
says why none came."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from gateway.ops.cli import main
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from tests.support.cli import one_pool
from tests.support.rig import Rig


def bot_messages(sim: Simulator, chat_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{sim.url}/sim/v1/messages", params={"chat_id": chat_id}, timeout=5)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert isinstance(items, list)
    return items


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


def send(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`feishu-gateway simulator send ARGV`: its exit code, stdout and stderr."""
    code = main(["simulator", "send", *argv])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def test_simulator_send_says_which_rule_kept_a_group_message_unanswered(
        edge: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    """The edge listener gates group messages on an @mention (the default)."""
    began = time.monotonic()  # (the default --wait, 30 s: the refusal is known before)
    code, out, err = send(capsys, "oc_send_team", "anyone there?", "--group", "--url",
                          edge.sim.url)
    assert time.monotonic() - began < 10, "no waiting out --wait for what is known"
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


@one_pool
def test_simulator_send_prints_a_streamed_answer_once_it_ended(
        feishu: Simulator, listener: GatewayProcess, chat_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Pieces 2 s apart (longer than any quiet spell would wait): the whole answer, once the
    stream ended; and, when the wait runs out first, what it said so far and that it gave
    up."""
    code, out, err = send(capsys, chat_id, "stream 4 2", "--url", feishu.url)
    assert (code, err) == (0, "") and out == "bot: w0 w1 w2 w3 \n", out
    code, out, err = send(capsys, chat_id, "stream 10 1", "--url", feishu.url, "--wait", "3")
    assert code == 1 and out.startswith("bot: w0"), (code, out, err)
    assert "w9" not in out and "the answer was still being written after 3s" in err

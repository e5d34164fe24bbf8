"""What `feishu-gateway` shows people and scripts: ids whole on a narrow terminal (they are
copied into `revoke` and `retry`), and `status --json` as data."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import redis

from gateway.agents.report import AgentReport, summary, view
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from gateway.simulator.payloads import new_id
from tests.support.cli import cli, ok, one_pool, read
from tests.support.replies import reply_of, started


def on_a_terminal(env: dict[str, str], columns: int, *argv: str) -> str:
    """What `feishu-gateway <argv>` shows on a terminal `columns` wide (colours taken out)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    with subprocess.Popen([sys.executable, "-m", "gateway.ops.cli", *argv],
                          stdin=subprocess.DEVNULL,
                          stdout=follower, stderr=subprocess.PIPE,
                          env={**env, "PATH": "/usr/bin:/bin", "COLUMNS": str(columns),
                               "TERM": "xterm-256color"}) as proc:
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    os.close(leader)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode()).replace("\r", "")


@one_pool
def test_chat_and_chats_print_every_id_whole_on_one_line_on_a_narrow_terminal(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str]) -> None:
    """Ids as long as Feishu's (a chat's and a message's 35 characters make a turn id of
    about 90) are copied into `revoke` and `retry`: never cut, folded or shortened."""
    chat_id = new_id("oc_")
    answered = feishu.send_text(chat_id, "hello")
    reply_of(feishu, chat_id, answered)
    flaky = feishu.send_text(chat_id, f"flaky {chat_id}")
    slow = feishu.send_text(chat_id, "sleep 30")
    feishu.send_text(chat_id, "waits")
    wait_until(lambda: started(redis_client, chat_id, slow), 20, "the second turn")
    view = read(gateway_env, "chat", chat_id)
    turn = view["turn"]
    ids = {chat_id, turn["turn_id"], turn["task_id"], answered, flaky, slow,
           *(m["message_id"] for m in view["pending"]["first"]),
           *(r["turn_id"] for r in view["history"])}
    assert len(turn["turn_id"]) > 80 and len(ids) == 8, ids
    for columns in (80, 40):
        shown = on_a_terminal(gateway_env, columns, "chat", chat_id)
        assert [i for i in ids if i not in shown] == [], shown
        listed = on_a_terminal(gateway_env, columns, "chats", "--limit", "1000")
        assert chat_id in listed and turn["task_id"] in listed, listed
    ok(gateway_env, "stop", chat_id)


AGENT_FIGURES = {"size": 2, "cap": 2, "held": 1, "built": 16, "evictions": {"idle": 1, "cap": 13},
                 "soft": 13, "hard": 1, "failed": 0, "in_place": 0, "parked": 3,
                 "release_s_max": 0.002, "release_s_total": 0.021, "signature": "1a2b3c4d5e6f"}
"""One worker process's agent figures, as its cache counts them (AgentCache.stats)."""


def test_status_gives_each_worker_processs_agent_figures_as_data(
        gateway_env: dict[str, str], redis_client: redis.Redis) -> None:
    owner = f"host:4211:{new_id('')[:4]}"
    AgentReport(redis_client, owner, lambda: AGENT_FIGURES).step()  # what the process writes
    result = cli(gateway_env, "status", "--json")
    assert result.returncode in (0, 1), result.stderr  # 1: no worker answered (not asked here)
    agents = json.loads(result.stdout)["agents"]
    age_s = agents[owner]["age_s"]
    assert isinstance(age_s, float) and 0 <= age_s < 60, age_s
    assert agents[owner] == {
        "cached": 2, "cap": 2, "in_use": 1, "built": 16, "let_go": {"cap": 13, "idle": 1},
        "released": {"soft": 13, "hard": 1, "failed": 0, "in_place": 0},
        "release_s_max": 0.002, "release_s_total": 0.021, "waiting": 3,
        "config": "1a2b3c4d5e6f", "age_s": age_s}
    plain = cli(gateway_env, "status").stdout
    assert f"  {owner}: 2 cached (cap 2, 1 in use), 16 built; let go: cap=13 idle=1; released " \
           "soft=13 hard=1 failed=0 in-place=0 (slowest 0.002s), 3 waiting; config " \
           "1a2b3c4d5e6f\n" in plain
    assert f"  {owner}: {summary(view(AGENT_FIGURES))}\n" in plain, "the worker log's line"

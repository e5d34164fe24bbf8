"""Logs of real processes: JSON lines with the turn's ids and no message bodies, and a plain
`celery -A tasks worker` that says it is ready and logs each turn at GATEWAY_LOG_LEVEL."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.ops.processes import GatewayProcess, wait_until
from tests.support.replies import reply_of
from tests.support.rig import Rig, rig_up


@pytest.fixture(scope="module")
def json_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, GATEWAY_LOG_FORMAT="json", GATEWAY_LOG_LEVEL="DEBUG") as rig:
        yield rig


def json_lines(log: str) -> list[dict[str, Any]]:
    """Every logged line (Celery's banner is printed, not logged, so it is left out)."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_processes_log_json_lines_with_the_turns_ids_and_no_message_bodies(
        json_rig: Rig) -> None:
    sim, chat = json_rig.sim, "oc_json_logs"
    body = "private " + "x" * 300
    answered = sim.send_text(chat, body)
    failed = sim.send_text(chat, "boom now")
    reply_of(sim, chat, answered)
    reply_of(sim, chat, failed)
    worker = wait_until(lambda: next((line for line in json_lines(json_rig.fleet.logs("worker"))
                                      if line["msg"].startswith("agent failed on message")),
                                     None), 10, "the failure's line")
    assert isinstance(worker, dict)
    assert (worker["chat_id"], worker["message_id"], worker["level"]) == (chat, failed, "ERROR")
    assert worker["turn_id"].startswith(f"turn:{chat}:{failed}:") and worker["fence"]
    assert "RuntimeError: scripted failure" in worker["exc"]
    listener = json_lines(json_rig.fleet.logs("listener"))
    assert any(line.get("message_id") == answered and line.get("chat_id") == chat
               for line in listener), "the listener's lines about the message carry its ids"
    for log in (json_rig.fleet.logs("worker"), json_rig.fleet.logs("listener")):
        assert "x" * 60 not in log, "a message body beyond a short prefix"


PLAIN_WORKER_ARGV = ["-m", "celery", "-A", "tasks", "worker", "-c", "1", "--without-gossip",
                     "--without-mingle"]


@pytest.fixture(scope="module")
def workerless_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A listener and no worker: each test starts its own, so its worker runs the turns."""
    with rig_up(tmp_path_factory, start="listener") as rig:
        yield rig


@contextlib.contextmanager
def worker_of(rig: Rig, workdir: Path, name: str, *argv: str,
              **env: str) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(name, [*PLAIN_WORKER_ARGV, "-n", f"{name}@%h", *argv],
                          {**rig.env, **env}, workdir)
    try:
        yield proc
    finally:
        proc.stop()


def test_a_worker_without_a_log_level_says_it_is_ready_and_logs_a_line_per_turn(
        workerless_rig: Rig, tmp_path: Path) -> None:
    """GATEWAY_LOG_LEVEL (INFO by default) is the worker's level: Celery's own default,
    WARNING, would hide its ready line and every turn."""
    sim, chat = workerless_rig.sim, f"oc_plain_{uuid.uuid4().hex[:8]}"
    with worker_of(workerless_rig, tmp_path, "plain") as worker:
        worker.wait_for_log("plain@", timeout_s=60)  # the banner
        worker.wait_for_log("ready.", timeout_s=60)
        text = "a private question"
        message_id = sim.send_text(chat, text)
        assert reply_of(sim, chat, message_id) == f"echo: {text}"
        line = wait_until(lambda: next((line for line in worker.log().splitlines()
                                        if f"turn turn:{chat}:{message_id}:" in line), None),
                          10, "the turn's line")
    assert isinstance(line, str)
    assert re.search(rf" INFO gateway\.worker\.turn_runner: turn turn:{chat}:{message_id}:\d+ "
                     rf"of chat {chat} replied in \d+\.\d\ds \(attempt 1\)$", line), line


def test_an_operators_log_level_wins_over_gateway_log_level(workerless_rig: Rig,
                                                            tmp_path: Path) -> None:
    with worker_of(workerless_rig, tmp_path, "chosen", "-l", "INFO",
                   GATEWAY_LOG_LEVEL="ERROR") as worker:
        worker.wait_for_log("ready.", timeout_s=60)

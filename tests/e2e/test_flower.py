"""Flower against the gateway's broker: turns listed with readable names, arguments and
outcomes, and a revoke from Flower's API that lets the chat go on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.ops.embedded_redis import free_port
from gateway.ops.processes import REPO, GatewayProcess, wait_until
from tests.support.cli import read
from tests.support.replies import replies_to, reply_of, started
from tests.support.rig import Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, GATEWAY_TASK_EVENTS="true") as rig:
        yield rig


@pytest.fixture(scope="module")
def flower(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    proc = GatewayProcess("flower", ["-m", "celery", "-A", "tasks", "flower",
                                     "--address=127.0.0.1", f"--port={port}"],
                          {**rig.env, "FLOWER_UNAUTHENTICATED_API": "true"},
                          Path(tmp_path_factory.mktemp("flower")))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(url, "/api/workers") is not None, 60, "Flower's API")
        wait_until(lambda: events_flow(rig, url), 60, "Flower to receive the task events",
                   interval_s=2.0)
        yield url
    finally:
        proc.stop()


def events_flow(rig: Rig, url: str) -> bool:
    """Whether Flower saw a whole turn from its first event: it serves its HTTP API before
    its event receiver listens, and a turn whose "received" event it missed has no name.
    Sends a warm-up message each time it is asked and nothing was seen yet."""
    if any(t.get("name") == "gateway.run_turn" and t.get("state") == "SUCCESS"
           for t in turns(url, "oc_flower_warmup").values()):
        return True
    rig.sim.send_text("oc_flower_warmup", "warm-up")
    return False


def _get(url: str, path: str) -> Any:
    try:
        response = httpx.get(url + path, timeout=5)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def turns(url: str, chat_id: str) -> dict[str, dict[str, Any]]:
    """Flower's tasks of one chat, by task id."""
    tasks = _get(url, "/api/tasks") or {}
    return {tid: t for tid, t in tasks.items() if tid.startswith(f"turn:{chat_id}:")}


def test_flower_lists_turns_with_their_chat_message_text_and_outcome(rig: Rig,
                                                                     flower: str) -> None:
    chat_id = "oc_flower_named"
    message_id = rig.sim.send_text(chat_id, "hello from flower")
    assert reply_of(rig.sim, chat_id, message_id) == "echo: hello from flower"
    found = wait_until(lambda: [t for t in turns(flower, chat_id).values()
                                if t.get("state") == "SUCCESS"], 30, "the turn in Flower")
    assert isinstance(found, list)
    [task] = found
    assert task["name"] == "gateway.run_turn"
    assert task["uuid"].startswith(f"turn:{chat_id}:{message_id}:")
    assert f"'chat_id': '{chat_id}'" in task["kwargs"]
    assert "'text': 'hello from flower'" in task["kwargs"]
    assert task["result"] == "'replied'"


def test_a_turn_revoked_in_flower_never_runs_and_its_chat_goes_on(rig: Rig,
                                                                  flower: str) -> None:
    workers = _get(flower, "/api/workers?refresh=1") or {}
    slots = sum(int(w.get("stats", {}).get("pool", {}).get("max-concurrency", 0))
                for w in workers.values())
    assert slots > 0, json.dumps(workers)[:500]
    client = rig.client()
    sleepers = {f"oc_flower_busy{n}": "" for n in range(slots)}
    for chat in sleepers:
        sleepers[chat] = rig.sim.send_text(chat, "sleep 30")
    wait_until(lambda: all(started(client, c, m) for c, m in sleepers.items()), 20,
               "every slot busy")
    chat_id = "oc_flower_revoked"
    doomed = rig.sim.send_text(chat_id, "never runs")
    queued = wait_until(lambda: list(turns(flower, chat_id)), 20, "the queued turn in Flower")
    assert isinstance(queued, list)
    [task_id] = queued
    response = httpx.post(f"{flower}/api/task/revoke/{task_id}", timeout=10)
    assert response.status_code == 200, response.text
    for chat in sleepers:
        rig.sim.send_text(chat, "/stop")
    wait_until(lambda: turns(flower, chat_id).get(task_id, {}).get("state") == "REVOKED", 30,
               "the revoke seen by the worker")
    after = rig.sim.send_text(chat_id, "goes on")
    assert reply_of(rig.sim, chat_id, after) == "echo: goes on"
    assert doomed not in replies_to(rig.sim, chat_id)


def _running_turn(rig: Rig, chat_id: str, message_id: str) -> dict[str, Any]:
    wait_until(lambda: started(rig.client(), chat_id, message_id), 20, "the turn to start")
    turn = read(rig.env, "chat", chat_id)["turn"]
    assert turn["message_id"] == message_id and turn["state"] == "running", turn
    return dict(turn)


def _history(rig: Rig, chat_id: str) -> list[tuple[str, str]]:
    return [(r["message_id"], r["outcome"]) for r in read(rig.env, "chat", chat_id)["history"]]


def test_a_running_turn_terminated_in_flower_is_stopped_and_its_chat_goes_on(
        rig: Rig, flower: str) -> None:
    chat_id = "oc_flower_terminated"
    hung = rig.sim.send_text(chat_id, "hang 30")
    behind = rig.sim.send_text(chat_id, "behind the hung one")
    turn = _running_turn(rig, chat_id, hung)
    response = httpx.post(f"{flower}/api/task/revoke/{turn['task_id']}",
                          params={"terminate": "true"}, timeout=10)
    assert response.status_code == 200, response.text
    assert reply_of(rig.sim, chat_id, behind) == "echo: behind the hung one"
    assert hung not in replies_to(rig.sim, chat_id)
    assert _history(rig, chat_id) == [(behind, "replied"), (hung, "stopped")]


def test_terminating_a_task_that_runs_a_later_turn_of_its_chat_stops_that_turn(
        rig: Rig, flower: str) -> None:
    chat_id = "oc_flower_drained"
    first = rig.sim.send_text(chat_id, "sleep 1")
    hung = rig.sim.send_text(chat_id, "hang 30")
    behind = rig.sim.send_text(chat_id, "behind the hung one")
    turn = _running_turn(rig, chat_id, hung)
    assert turn["task_id"].split(":")[2] == first, "the first turn's task drained the chat"
    response = httpx.post(f"{flower}/api/task/revoke/{turn['task_id']}",
                          params={"terminate": "true"}, timeout=10)
    assert response.status_code == 200, response.text
    assert reply_of(rig.sim, chat_id, behind) == "echo: behind the hung one"
    assert hung not in replies_to(rig.sim, chat_id)
    assert (hung, "stopped") in _history(rig, chat_id)


_COPY = """
import json, sys
from tasks import app
from gateway.broker.names import RUN_TURN, TURNS_QUEUE
task_id, kwargs = sys.argv[1], json.loads(sys.argv[2])
app.control.revoke(task_id)
app.send_task(RUN_TURN, kwargs=kwargs, task_id=task_id, queue=TURNS_QUEUE)
"""


def test_a_revoked_copy_of_a_running_turn_leaves_that_turn_running(rig: Rig,
                                                                   flower: str) -> None:
    """A plain revoke never stops a running task in Celery; a copy of it the broker hands
    out again (a redelivery after the visibility timeout) is skipped as revoked, and the
    turn it copies goes on to answer."""
    chat_id = "oc_flower_copy"
    slow = rig.sim.send_text(chat_id, "sleep 5")
    turn = _running_turn(rig, chat_id, slow)
    kwargs = {"chat_id": chat_id, "message_id": slow, "fence": int(turn["fence"])}
    subprocess.run([sys.executable, "-c", _COPY, turn["task_id"], json.dumps(kwargs)],
                   env=rig.env, check=True, timeout=60, cwd=str(REPO))
    wait_until(lambda: f"Discarding revoked task: gateway.run_turn[{turn['task_id']}]"
               in rig.fleet.logs("worker"), 30, "the copy discarded as revoked")
    assert slow not in replies_to(rig.sim, chat_id), "the copy came while the turn ran"
    assert reply_of(rig.sim, chat_id, slow) == "echo: sleep 5"
    assert _history(rig, chat_id) == [(slow, "replied")]

"""Flower against the gateway's broker: turns listed with readable names, arguments and
outcomes, and a revoke from Flower's API that lets the chat go on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.embedded_redis import free_port
from gateway.processes import GatewayProcess, wait_until
from tests.conftest import Rig
from tests.test_cancel import reply_of, started
from tests.test_pipeline import replies_to


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    rig = Rig(tmp_path_factory, GATEWAY_TASK_EVENTS="true").up()
    try:
        yield rig
    finally:
        rig.close()


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
        yield url
    finally:
        proc.stop()


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

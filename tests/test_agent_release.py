"""Agents let go by real workers (issue 9, items 4, 5 and 7): each one released exactly once,
in the process that built it, through `release_agent` tasks on the low-priority queue (or in
place when no task comes); /new, a turn run elsewhere and a configuration change rebuild the
agent on every worker process. The agent (tests.agents:tracked) records its life in Redis."""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from gateway.names import RELEASE_QUEUE, TURNS_QUEUE
from gateway.processes import GatewayProcess, wait_until
from tests.agents import AGENTS_KEY
from tests.conftest import Rig
from tests.test_cancel import operator, reply_of

TRACKED = "tests.agents:tracked"


def lives(rig: Rig) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in rig.client().lrange(AGENTS_KEY, 0, -1)]


def released(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] in ("soft", "hard")]


def assert_released_once_where_built(events: list[dict[str, Any]]) -> None:
    built = {e["agent"]: e["pid"] for e in events if e["event"] == "built"}
    ends = Counter(e["agent"] for e in released(events))
    assert all(n == 1 for n in ends.values()), f"released more than once: {ends}"
    assert set(ends) == set(built), f"never released: {set(built) - set(ends)}"
    assert all(e["pid"] == built[e["agent"]] for e in released(events)), \
        "each agent released in the process that built it"


@pytest.fixture
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    rig = Rig(tmp_path_factory, GATEWAY_AGENT=TRACKED, GATEWAY_AGENT_CACHE_CAP="2")
    yield rig.up(worker=False)
    rig.close(kill=True)


def test_agents_let_go_are_released_once_in_their_process_by_a_low_priority_worker(
        rig: Rig, tmp_path: Path) -> None:
    """A dedicated release worker (`-Q gateway.release`) runs the tasks; the prefork
    processes that built the agents release them; status shows the figures."""
    turns = rig.fleet("worker", concurrency=2, extra=("-Q", TURNS_QUEUE))
    releases = rig.fleet("worker", concurrency=1, extra=("-Q", RELEASE_QUEUE))
    sent = [(f"oc_rel_{n}", rig.sim.send_text(f"oc_rel_{n}", f"hello {n}")) for n in range(30)]
    for chat, message_id in sent:
        assert reply_of(rig.sim, chat, message_id) == f"echo: hello {chat[7:]}"

    def soft_releases_done() -> bool:
        events = lives(rig)
        per_pid = Counter(e["pid"] for e in events if e["event"] == "built")
        let_go = sum(max(0, n - 2) for n in per_pid.values())  # the cap is 2 per process
        return len(released(events)) == let_go > 0

    wait_until(soft_releases_done, 30, "every agent over the cap released")
    assert all(e["event"] == "soft" for e in released(lives(rig))), "cap: soft releases"
    wait_until(lambda: "handed back" in releases.log(), 10, "the release worker's tasks")
    status = wait_until(lambda: (out := operator(rig.env, tmp_path, "status"))
                        and "agents, per worker process" in out and "cap=" in out and out,
                        30, "the agent figures in status")
    assert "in-place=0" in str(status) and "failed=0" in str(status), status
    assert "Task gateway.run_turn[" not in releases.log(), "no turn reaches the release queue"
    assert "Task gateway.release_agent[" not in turns.log(), "no release reaches the turns queue"
    turns.stop()  # warm shutdown: what is still cached goes, fully
    events = lives(rig)
    assert_released_once_where_built(events)
    assert {e["event"] for e in released(events)} == {"soft", "hard"}
    assert "released in place" not in turns.log()


def test_without_a_release_consumer_agents_are_released_in_place(rig: Rig) -> None:
    turns = rig.fleet("worker", concurrency=1, extra=("-Q", TURNS_QUEUE),
                      GATEWAY_AGENT_RELEASE_FALLBACK_S="1", GATEWAY_AGENT_CACHE_CAP="1")
    for n in range(3):
        reply_of(rig.sim, f"oc_inplace_{n}", rig.sim.send_text(f"oc_inplace_{n}", "hi"))
    wait_until(lambda: len(released(lives(rig))) == 2, 20, "both evicted agents released")
    wait_until(lambda: "released in place" in turns.log(), 10, "the log line")
    turns.stop()
    assert_released_once_where_built(lives(rig))


class Switch:
    """Which worker takes the turns: Celery's own remote control (what an operator's
    `celery control cancel_consumer` does)."""

    def __init__(self, rig: Rig, workers: list[GatewayProcess]) -> None:
        self.app = Celery(broker=rig.redis.url)
        self.names = [f"{w.name}@{socket.gethostname()}" for w in workers]

    def to(self, index: int) -> None:
        for n, name in enumerate(self.names):
            if n == index:
                self.app.control.add_consumer(TURNS_QUEUE, destination=[name], reply=True,
                                              timeout=5)
            else:
                self.app.control.cancel_consumer(TURNS_QUEUE, destination=[name], reply=True,
                                                 timeout=5)


def test_new_another_process_s_turn_and_a_config_change_rebuild_on_every_process(
        rig: Rig, tmp_path: Path) -> None:
    config = tmp_path / "agent.conf"
    config.write_text("v1")
    workers = [rig.fleet("worker", concurrency=1, TEST_AGENT_CONFIG=str(config))
               for _ in range(2)]
    switch, chat = Switch(rig, workers), "oc_rebuild"
    pid_of: dict[int, int] = {}

    def turn(on: int, text: str) -> None:
        switch.to(on)
        assert reply_of(rig.sim, chat, rig.sim.send_text(chat, text)) == f"echo: {text}"
        ran = [e for e in lives(rig) if e["event"] == "run"][-1]
        pid_of.setdefault(on, ran["pid"])
        assert ran["pid"] == pid_of[on], f"turn {text!r} ran on worker {on}"

    def agent_runs() -> list[tuple[int, str, str]]:
        """(worker, agent, session) of each run, in order."""
        by_pid = {pid: n for n, pid in pid_of.items()}
        return [(by_pid[e["pid"]], e["agent"], e["session"]) for e in lives(rig)
                if e["event"] == "run"]

    def ends() -> dict[str, str]:
        return {e["agent"]: e["event"] for e in released(lives(rig))}

    turn(0, "one")
    turn(1, "two")
    turn(0, "three")  # worker 1 ran "two": worker 0's agent missed it, so it is rebuilt
    runs = agent_runs()
    assert runs[0][1] != runs[2][1] and runs[0][2] == runs[2][2] == f"{chat}#0"
    wait_until(lambda: ends().get(runs[0][1]) == "soft", 10, "the stale agent's soft release")
    turn(0, "four")
    assert agent_runs()[3][1] == runs[2][1], "reused while nobody else ran a turn"

    rig.sim.send_text(chat, "/new")
    wait_until(lambda: rig.client().exists(f"gw:{{{chat}}}:gen"), 10, "the new session")
    turn(1, "five")
    turn(0, "six")
    runs = agent_runs()
    assert runs[4][2] == runs[5][2] != f"{chat}#0", "both run the new session"
    old_on_1, old_on_0 = runs[1][1], runs[3][1]
    wait_until(lambda: ends().get(old_on_1) == ends().get(old_on_0) == "hard", 10,
               "/new ends the old session's agent fully on both processes")

    config.write_text("v2")
    turn(1, "seven")
    turn(0, "eight")
    runs = agent_runs()
    assert runs[6][1] != runs[4][1] and runs[7][1] != runs[5][1], "rebuilt on both processes"
    wait_until(lambda: ends().get(runs[4][1]) == ends().get(runs[5][1]) == "soft", 10,
               "the old configuration's agents released softly")
    for worker in workers:
        worker.stop()
    assert_released_once_where_built(lives(rig))

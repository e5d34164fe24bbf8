"""Agents let go by real workers: each one released exactly once,
in the process that built it, through `release_agent` tasks on the low-priority queue (or in
place when no task comes); /new, a turn run elsewhere and a configuration change rebuild the
agent on every worker process. The agent (tests.support.agents:tracked) records its life in
Redis."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from gateway.agents.cache import AgentCache
from gateway.agents.release import Parcel, ReleaseLane
from gateway.broker.names import RELEASE_QUEUE, TURNS_QUEUE
from gateway.broker.release_post import RELEASE_QUEUE_CAP_MESSAGES, CeleryPost
from gateway.core.model import Turn
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import GatewayProcess, wait_until
from tests.support.agents import AGENTS_KEY, context_for_tests
from tests.support.cli import operator
from tests.support.replies import reply_of
from tests.support.rig import Rig, rig_up

TRACKED = "tests.support.agents:tracked"
REMEMBERING = "tests.support.agents:remembering"


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
    with rig_up(tmp_path_factory, start="listener", kill=True, GATEWAY_AGENT=TRACKED,
                GATEWAY_AGENT_CACHE_CAP="2") as rig:
        yield rig


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


def publisher_on(redis_url: str) -> Celery:
    """A Celery app that publishes to this Redis through the gateway's own Redis transport
    (as workers do); nothing consumes what it sends."""
    app = Celery(broker=redis_url, set_as_current=False)
    app.conf.broker_transport = "gateway.broker.redis_transport:Transport"
    return app


def release_task_ids(client: redis.Redis) -> list[str]:
    """The ids of the tasks waiting in the release queue, newest first."""
    return [json.loads(raw)["headers"]["id"] for raw in client.lrange(RELEASE_QUEUE, 0, -1)]


@pytest.fixture
def broker(private_redis: EmbeddedRedis) -> Iterator[tuple[redis.Redis, Celery]]:
    """A Redis broker with an empty release queue, and a publisher on it."""
    client = redis.Redis.from_url(private_redis.url, decode_responses=True)
    client.delete(RELEASE_QUEUE)
    app = publisher_on(private_redis.url)
    yield client, app
    app.close()
    client.close()


class CountedAgent:
    """An agent of an in-process cache: counts its releases by session."""

    def __init__(self, session_key: str, ends: Counter[str]) -> None:
        self.session_key = session_key
        self._ends = ends

    def run(self, turn: Turn) -> str:
        return f"echo: {turn.text}"

    def soft_release(self) -> None:
        self._ends[self.session_key] += 1


def test_unconsumed_release_queue_stays_within_its_cap_and_every_agent_is_released(
        broker: tuple[redis.Redis, Celery]) -> None:
    """A burst of evictions sends more tasks than the cap before any is overdue: the
    queue keeps the newest ones only, and the lane's fallback releases every agent."""
    client, app = broker
    now = [0.0]
    ends: Counter[str] = Counter()
    lane = ReleaseLane("host:1:burst", CeleryPost(app, client, expires_s=600),
                       fallback_s=60, clock=lambda: now[0])
    cache = AgentCache(lambda key, _: CountedAgent(key, ends), 1,
                       context=context_for_tests(client), lane=lane)
    evicted = RELEASE_QUEUE_CAP_MESSAGES + 200
    try:
        for n in range(evicted + 1):
            with cache.hold(f"oc_burst_{n}#0"):
                pass
        last = f"release:oc_burst_{evicted - 1}#0:"
        wait_until(lambda: (ids := release_task_ids(client)) and ids[0].startswith(last), 60,
                   "the last eviction's task")
        assert client.llen(RELEASE_QUEUE) == RELEASE_QUEUE_CAP_MESSAGES
        assert release_task_ids(client)[-1].startswith(
            f"release:oc_burst_{evicted - RELEASE_QUEUE_CAP_MESSAGES}#0:"), "the oldest went"
        assert lane.parked == evicted and not ends, "each agent waits for its task"
        now[0] += 61  # no task came: past the fallback
        assert lane.drain(30) == 0
        assert len(ends) == evicted and set(ends.values()) == {1}, "each released once"
        assert lane.counts()["in-place"] == evicted
    finally:
        cache.close(5)


def test_release_tasks_past_their_deadline_leave_the_broker(
        broker: tuple[redis.Redis, Celery]) -> None:
    """Nothing consumes the release queue: a publish drops the tasks whose agents were
    released in place meanwhile, and the queue is gone once its newest task is too."""
    client, app = broker
    post = CeleryPost(app, client, expires_s=1.0)
    for n in range(5):
        post.send(Parcel("host:1:gone", f"t{n}", "cap", f"oc_old_{n}#0"))
    assert client.llen(RELEASE_QUEUE) == 5
    time.sleep(1.2)
    post.send(Parcel("host:1:gone", "fresh", "cap", "oc_fresh#0"))
    assert release_task_ids(client) == ["release:oc_fresh#0:fresh"]
    wait_until(lambda: not client.exists(RELEASE_QUEUE), 5, "the release queue to expire")


def test_without_a_release_consumer_the_release_queue_empties_and_status_shows_its_length(
        rig: Rig, tmp_path: Path) -> None:
    turns = rig.fleet("worker", concurrency=1, extra=("-Q", TURNS_QUEUE),
                      GATEWAY_AGENT_RELEASE_FALLBACK_S="1", GATEWAY_AGENT_CACHE_CAP="1")
    for n in range(6):
        reply_of(rig.sim, f"oc_expire_{n}", rig.sim.send_text(f"oc_expire_{n}", "hi"))
    wait_until(lambda: len(released(lives(rig))) == 5, 20, "the evicted agents released")
    client = rig.client()
    wait_until(lambda: not client.exists(RELEASE_QUEUE), 10,
               "the release tasks nobody took to leave the broker")

    app = publisher_on(rig.redis.url)  # more tasks than the cap, nobody taking them
    try:
        post = CeleryPost(app, client, expires_s=600)
        for n in range(RELEASE_QUEUE_CAP_MESSAGES + 20):
            post.send(Parcel("host:1:gone", f"t{n}", "cap", f"oc_many_{n}#0"))
    finally:
        app.close()
    status = json.loads(operator(rig.env, tmp_path, "status", "--json"))
    assert status["queues"][RELEASE_QUEUE] == RELEASE_QUEUE_CAP_MESSAGES
    assert f"{RELEASE_QUEUE} {RELEASE_QUEUE_CAP_MESSAGES}" in operator(rig.env, tmp_path,
                                                                       "status")
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


@pytest.fixture
def user_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A stateful agent, and a session per user in groups."""
    with rig_up(tmp_path_factory, start="listener", kill=True, GATEWAY_AGENT=REMEMBERING,
                FEISHU_SESSION_SCOPE="user") as rig:
        yield rig


def test_a_user_s_agent_kept_while_another_process_ran_that_user_s_turn_is_rebuilt(
        user_sessions: Rig) -> None:
    """Worker 0 keeps user A's agent; worker 1 runs A's second turn; worker 0 runs user B's
    turn, then A's third: A's agent there missed A's second turn, whoever ran the chat's
    last turn."""
    rig, chat = user_sessions, "oc_users"
    workers = [rig.fleet("worker", concurrency=1) for _ in range(2)]
    switch, state = Switch(rig, workers), rig.client()
    pid_of: dict[int, int] = {}

    def say(on: int, user: str, text: str) -> str:
        wait_until(lambda: not state.exists(f"gw:{{{chat}}}:lease"), 10,
                   "the chat's previous turn over")
        switch.to(on)
        message_id = rig.sim.send_text(chat, text, chat_type="group", sender_open_id=user)
        reply = reply_of(rig.sim, chat, message_id)
        ran = [e for e in lives(rig) if e["event"] == "run"][-1]
        assert ran["pid"] == pid_of.setdefault(on, ran["pid"]), f"{text!r} ran on worker {on}"
        return reply

    assert say(0, "ou_a", "a one") == "heard: a one"
    assert say(1, "ou_a", "a two") == "heard: a one | a two"
    assert say(0, "ou_b", "b one") == "heard: b one"
    assert pid_of[0] != pid_of[1]
    assert say(0, "ou_a", "a three") == "heard: a one | a two | a three"

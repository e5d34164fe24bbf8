"""The agent cache: bounded, never evicting an agent in use, sweeping idle
ones, and releasing what it lets go on a lane thread, never under its lock. Real threads."""

from __future__ import annotations

import logging
import threading

import pytest

from gateway.agents.cache import (
    AgentCache,
    ReleaseLane,
    conversation_of,
    session_key,
    split_session,
)
from gateway.agents.release import Parcel
from gateway.core.model import AgentContext, Turn
from gateway.ops.processes import wait_until
from tests.support.agents import context_for_tests

RELEASING = threading.Event()
GO_ON = threading.Event()
CONTEXT = context_for_tests()


class Agent:
    """Counts its releases; with `slow`, a release blocks until GO_ON is set."""

    def __init__(self, session_key: str, slow: bool = False) -> None:
        self.session_key = session_key
        self.slow = slow
        self.releaser = ""
        self.releases = 0

    def run(self, turn: Turn) -> str:
        return self.session_key

    def soft_release(self) -> None:
        self.releaser = threading.current_thread().name
        if self.slow:
            RELEASING.set()
            assert GO_ON.wait(30)
        self.releases += 1


def new_agent(session_key: str, context: AgentContext) -> Agent:
    return Agent(session_key)


def test_a_release_that_blocks_never_blocks_the_cache() -> None:
    cache = AgentCache(lambda key, _: Agent(key, slow=key == "slow"), cap=1, context=CONTEXT)
    with cache.hold("slow"):
        pass
    with cache.hold("other"):  # over the cap: "slow" goes, its release blocks on the lane
        pass
    assert RELEASING.wait(10), "the slow release started"
    served = []

    def turn() -> None:  # another thread takes the lock and gets an agent meanwhile
        with cache.hold("third") as agent:
            served.append(agent.run(None))  # type: ignore[arg-type]

    thread = threading.Thread(target=turn)
    thread.start()
    thread.join(10)
    assert served == ["third"] and not GO_ON.is_set(), "served while the release still blocks"
    GO_ON.set()
    wait_until(lambda: cache.lane.released["cap"] >= 2, 10, "both releases")


def test_the_cache_stays_bounded_and_each_agent_is_released_once_on_its_lane() -> None:
    built: list[Agent] = []

    def factory(key: str, context: AgentContext) -> Agent:
        agent = Agent(key)
        built.append(agent)
        return agent

    cache = AgentCache(factory, cap=50, context=CONTEXT,
                       lane=ReleaseLane(name="lane-under-test"))
    for n in range(10_000):
        with cache.hold(f"oc_{n}#0"):
            assert len(cache) <= 50
    wait_until(lambda: cache.lane.released["cap"] == 10_000 - 50, 30, "every release")
    assert all(a.releases == 1 and a.releaser == "lane-under-test"
               for a in built[:-50]), "each evicted agent once, on the lane"
    assert all(a.releases == 0 for a in built[-50:])
    assert cache.evictions == {"cap": 10_000 - 50}


def test_an_agent_in_use_is_never_evicted(caplog: pytest.LogCaptureFixture) -> None:
    cache = AgentCache(new_agent, cap=1, context=CONTEXT)
    with caplog.at_level(logging.WARNING), cache.hold("busy") as busy:
        with cache.hold("a"), cache.hold("b"):
            assert len(cache) == 3, "over the cap rather than evict what is held"
        assert busy.releases == 0  # type: ignore[attr-defined]
        with cache.hold("busy") as again:
            assert again is busy, "the held agent is still the session's"
    assert len(cache) == 1
    assert sum("over its cap" in r.message for r in caplog.records) == 1, "said once"


def test_idle_agents_are_swept_after_their_ttl() -> None:
    now = [0.0]
    cache = AgentCache(new_agent, cap=10, context=CONTEXT, idle_ttl_s=60, clock=lambda: now[0])
    with cache.hold("old") as old:
        pass
    now[0] = 30.0
    with cache.hold("recent"):
        now[0] = 100.0
        assert cache.sweep_idle() == 1, "only the one idle for over 60 s"
    wait_until(lambda: old.releases == 1, 10, "its release")  # type: ignore[attr-defined]
    assert len(cache) == 1 and cache.evictions == {"idle": 1}


class Teardown(Agent):
    """Records which hook ran; `block` makes its full release wait for `go`."""

    def __init__(self, session_key: str, block: threading.Event | None = None) -> None:
        super().__init__(session_key)
        self.hooks: list[str] = []
        self.block = block

    def soft_release(self) -> None:
        self.hooks.append("soft")

    def release(self) -> None:
        self.hooks.append("hard")
        if self.block is not None:
            assert self.block.wait(30)


def new_teardown(session_key: str, context: AgentContext) -> Teardown:
    return Teardown(session_key)


def test_shutdown_releases_every_agent_fully_within_its_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = AgentCache(new_teardown, cap=10, context=CONTEXT)
    agents = []
    for n in range(3):
        with cache.hold(f"oc_{n}#0") as agent:
            agents.append(agent)
    with caplog.at_level(logging.INFO):
        assert cache.close(5.0) == 0
    assert [a.hooks for a in agents] == [["hard"]] * 3 and len(cache) == 0  # type: ignore[attr-defined]
    assert any("released 3 agents" in r.message for r in caplog.records)


def test_a_release_that_hangs_does_not_hold_up_shutdown_past_its_timeout() -> None:
    go = threading.Event()
    cache = AgentCache(lambda key, _: Teardown(key, block=go), cap=10, context=CONTEXT)
    with cache.hold("oc_stuck#0"):
        pass
    with cache.hold("oc_fine#0"):
        pass
    assert cache.close(0.3) == 2, "the first blocks the lane: neither finished in time"
    go.set()
    wait_until(lambda: cache.lane.released["shutdown"] == 2, 10, "the releases, later")


def test_new_ends_the_old_session_s_agent_fully_once_its_turn_let_go() -> None:
    cache = AgentCache(new_teardown, cap=10, context=CONTEXT)
    with cache.hold("oc_a#0") as old_a:
        pass
    # /new while a turn of the old session runs
    with cache.hold("oc_b#0") as running, cache.hold("oc_b#7") as new_b:
        assert new_b is not running and running.hooks == []  # type: ignore[attr-defined]
    with cache.hold("oc_a#5"):
        pass
    wait_until(lambda: cache.lane.released["new"] == 2, 10, "both old sessions' releases")
    assert running.hooks == ["hard"] and old_a.hooks == ["hard"]  # type: ignore[attr-defined]
    assert len(cache) == 2 and cache.evictions == {"new": 2}
    with cache.hold("oc_a#5") as again:
        assert again.hooks == []  # type: ignore[attr-defined]


class Configured:
    """A factory whose configuration a test changes (`signature()`)."""

    def __init__(self) -> None:
        self.config = "v1"
        self.built: list[Agent] = []

    def __call__(self, key: str, context: AgentContext) -> Agent:
        agent = Agent(key)
        self.built.append(agent)
        return agent

    def signature(self, context: AgentContext) -> str:
        return self.config


def test_a_changed_configuration_rebuilds_agents_and_lets_the_old_ones_go_softly() -> None:
    factory = Configured()
    cache = AgentCache(factory, cap=10, context=CONTEXT)
    for key in ("oc_a#0", "oc_b#0"):
        with cache.hold(key):
            pass
    factory.config = "v2"
    with cache.hold("oc_a#0") as agent:
        assert agent is factory.built[2], "rebuilt under the new configuration"
    wait_until(lambda: factory.built[0].releases == 1, 10, "the old agent's soft release")
    assert cache.sweep_idle() == 1 and cache.evictions["config"] == 2, \
        "an idle agent of the old configuration goes at the next sweep"
    wait_until(lambda: factory.built[1].releases == 1, 10, "its soft release")
    with cache.hold("oc_a#0") as again:
        assert again is agent, "an agent of the current configuration is reused"


def test_an_agent_that_missed_its_session_s_last_turn_is_rebuilt() -> None:
    """Another process ran the session's previous turn: this process's agent is stale."""
    factory = Configured()
    cache = AgentCache(factory, cap=10, context=CONTEXT)
    with cache.hold("oc_a#0"):
        pass
    with cache.hold("oc_a#0", missed=True) as agent:
        assert agent is factory.built[1]
    wait_until(lambda: cache.lane.released["missed"] == 1, 10, "the stale one released")
    assert factory.built[0].releases == 1 and factory.built[1].releases == 0


def test_an_agent_found_stale_while_a_turn_holds_it_is_released_once_let_go() -> None:
    factory = Configured()
    cache = AgentCache(factory, cap=10, context=CONTEXT)
    with cache.hold("oc_a#0"):
        factory.config = "v2"
        with cache.hold("oc_a#0"):  # (a late duplicate run of the chat, say)
            pass
        held, fresh = factory.built
        assert held.releases == 0 and not cache.evictions, "not while it is held"
    wait_until(lambda: held.releases == 1, 10, "released once its turn let go")
    assert fresh.releases == 0 and cache.evictions == {"config": 1}


class Post:
    """The release post of a worker process, in memory: the task a test delivers by hand,
    and tokens handed back."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[Parcel] = []
        self._handed: list[str] = []
        self._guard = threading.Lock()
        self.fail = fail

    def send(self, parcel: Parcel) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.sent.append(parcel)

    def hand_back(self, token: str) -> None:
        with self._guard:
            self._handed.append(token)

    def take(self, owner: str) -> list[str]:
        with self._guard:
            taken, self._handed = self._handed, []
        return taken


def test_an_agent_let_go_waits_for_its_release_task_and_is_released_once() -> None:
    post = Post()
    lane = ReleaseLane("me", post, fallback_s=60)
    cache = AgentCache(new_agent, cap=1, context=CONTEXT, lane=lane)
    for key in ("oc_a#0", "oc_b#0", "oc_c#0"):
        with cache.hold(key):
            pass
    wait_until(lambda: len(post.sent) == 2, 10, "a release task per agent let go")
    first, second = post.sent
    assert (first.owner, first.cause, first.session) == ("me", "cap", "oc_a#0")
    assert lane.parked == 2 and lane.released["cap"] == 0, "nothing released before its task"
    assert lane.deliver(first.token), "the task ran in this process"
    post.hand_back(second.token)  # the task ran in another process: handed back
    wait_until(lambda: lane.released["cap"] == 2, 10, "both released on the lane")
    assert not lane.deliver(first.token), "a second delivery of a task releases nothing"
    assert lane.parked == 0 and lane.released["in-place"] == 0


def test_an_agent_whose_release_task_never_comes_is_released_in_place() -> None:
    post = Post(fail=True)
    lane = ReleaseLane("me", post, fallback_s=0.5)
    cache = AgentCache(new_agent, cap=1, context=CONTEXT, lane=lane)
    for key in ("oc_a#0", "oc_b#0"):
        with cache.hold(key):
            pass
    wait_until(lambda: lane.released["cap"] == 1, 10, "released in place after the fallback")
    assert lane.released["in-place"] == 1 and lane.parked == 0


def test_shutdown_releases_parked_agents_fully_without_their_tasks() -> None:
    post = Post()
    lane = ReleaseLane("me", post, fallback_s=60)
    built: list[Agent] = []

    def factory(key: str, context: AgentContext) -> Agent:
        built.append(Agent(key))
        return built[-1]

    cache = AgentCache(factory, cap=1, context=CONTEXT, lane=lane)
    for key in ("oc_a#0", "oc_b#0"):
        with cache.hold(key):
            pass
    wait_until(lambda: lane.parked == 1, 10, "one agent parked")
    assert cache.close(10) == 0
    assert lane.released["shutdown"] == 2 and lane.parked == 0
    assert [a.releases for a in built] == [1, 1], "each once (no `release()`: the soft one)"


def test_cap_and_idle_sweeps_over_10_000_sessions_release_each_agent_once_via_its_task(
        ) -> None:
    """Every agent let go goes through the task path (handed back by a task run
    elsewhere), is released once, and the cache never grows past its cap."""
    now = [0.0]
    built: list[Agent] = []

    def factory(key: str, context: AgentContext) -> Agent:
        built.append(Agent(key))
        return built[-1]

    class Relay(Post):
        def send(self, parcel: Parcel) -> None:  # the task ran at once, in another process
            self.hand_back(parcel.token)

    lane = ReleaseLane("me", Relay(), fallback_s=600, clock=lambda: now[0])
    cache = AgentCache(factory, cap=50, context=CONTEXT, idle_ttl_s=5, lane=lane,
                       clock=lambda: now[0])
    for n in range(10_000):
        with cache.hold(f"oc_{n}#0"):
            assert len(cache) <= 50
        if n % 1000 == 999:
            now[0] += 10  # everything cached is idle now
            assert cache.sweep_idle() == 50 and len(cache) == 0
    wait_until(lambda: lane.pending == 0, 60, "every release")
    assert all(a.releases == 1 for a in built) and len(built) == 10_000
    assert cache.evictions == {"cap": 10_000 - 10 * 50, "idle": 10 * 50}
    assert lane.counts().get("in-place", 0) == 0


@pytest.mark.parametrize(("scope", "chat_type", "thread", "expected"), [
    ("chat", "group", "omt_1", "oc_g"),
    ("user", "group", "omt_1", "oc_g/ou_a"),
    ("user", "p2p", "", "oc_g"),  # a direct chat is one user's anyway
    ("thread", "group", "omt_1", "oc_g/omt_1"),
    ("thread", "group", "", "oc_g"),  # outside threads: the chat's
])
def test_the_session_scope_names_whose_conversation_a_turn_continues(
        scope: str, chat_type: str, thread: str, expected: str) -> None:
    assert conversation_of("oc_g", scope, chat_type=chat_type, sender="ou_a",
                           thread_id=thread) == expected
    assert split_session(session_key(expected, 3)) == (expected, 3)

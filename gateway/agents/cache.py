"""Agents per worker process: an LRU map session key → agent, bounded by a cap, that never
lets go of an agent a running turn holds; agents it lets go (over the cap, idle too long, a
second one built by a race) are released on a lane thread of their own, so a slow release
never holds the cache's lock, a turn, a heartbeat or an ACK.

The lock is held for dictionary work only, never across a build or a release. An agent is
released in the process that built it (the lane is that process's thread): with prefork each
pool process has its own cache and lane; with threads, the threads of a process share them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gateway.loops import Periodic, describe
from gateway.types import Agent, AgentFactory

logger = logging.getLogger(__name__)


HARD = frozenset({"shutdown", "new", "duplicate"})
"""Causes that tear an agent down (`release()`); the others keep what a session's next
agent inherits (`soft_release()`)."""


@dataclass
class _Entry:
    agent: Agent
    used_at: float
    users: int = 0
    stale: bool = False
    """Its session was replaced (/new) while a turn held it: released when let go."""


def session_key(chat_id: str, generation: int) -> str:
    """Agents are cached per session; /new starts a new generation, hence a new session."""
    return f"{chat_id}#{generation}"


def split_session(key: str) -> tuple[str, int]:
    """`session_key`'s inverse; a key without a generation is generation 0."""
    chat, _, generation = key.rpartition("#")
    if not chat or not generation.isdigit():
        return key, 0
    return chat, int(generation)


@dataclass
class ReleaseLane:
    """Releases agents one after another on a daemon thread (started on first use, so a
    forked pool process starts its own): `soft_release()` if the agent has it."""

    name: str = "gateway-agent-release"
    released: Counter[str] = field(default_factory=Counter)
    """Releases done, by cause; `failed` counts the ones that raised."""

    def __post_init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Agent, str]] = queue.SimpleQueue()
        self._guard = threading.Condition()
        self._pending = 0
        self._thread: threading.Thread | None = None

    def submit(self, agent: Agent, cause: str) -> None:
        """Release `agent` soon: fully (`release()`) for a cause in HARD, else softly."""
        with self._guard:
            self._pending += 1  # counted before the lane can see it, so drain() never misses it
            self._jobs.put((agent, cause))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def drain(self, timeout_s: float) -> int:
        """Wait until every submitted release is done, up to `timeout_s`; how many are not."""
        with self._guard:
            self._guard.wait_for(lambda: self._pending == 0, timeout_s)
            return self._pending

    def _run(self) -> None:
        while True:
            agent, cause = self._jobs.get()
            try:
                self._release(agent, cause)
            finally:
                with self._guard:
                    self._pending -= 1
                    self._guard.notify_all()

    def _release(self, agent: Agent, cause: str) -> None:
        hook = "release" if cause in HARD else "soft_release"
        release: Callable[[], object] | None = getattr(agent, hook, None)
        if release is None and cause in HARD:
            release = getattr(agent, "soft_release", None)
        began = time.monotonic()
        try:
            if callable(release):
                release()
        except Exception as error:  # noqa: BLE001 (a thread's boundary: it must go on)
            self.released["failed"] += 1
            logger.warning("agent release (%s) failed: %s", cause, describe(error))
            return
        self.released[cause] += 1
        logger.debug("agent released (%s) in %.3fs", cause, time.monotonic() - began)


class AgentCache:
    def __init__(self, factory: AgentFactory, cap: int, *, idle_ttl_s: float = 3600.0,
                 lane: ReleaseLane | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._factory = factory
        self.cap = cap
        self.idle_ttl_s = idle_ttl_s
        self.lane = lane or ReleaseLane()
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._current: dict[str, str] = {}
        """chat id → the session key of its newest generation in the cache."""
        self._guard = threading.Lock()
        self._warned_full = False
        self._sweeper: Periodic | None = None
        self.evictions: Counter[str] = Counter()
        """Agents let go, by cause: `cap`, `idle`, `duplicate`."""

    def __len__(self) -> int:
        return len(self._entries)

    @contextmanager
    def hold(self, session_key: str) -> Iterator[Agent]:
        """The session's agent (built on first use, outside the lock), kept from eviction
        until the block ends."""
        self._ensure_sweeping()
        with self._guard:
            entry = self._entries.get(session_key)
            if entry is not None:
                entry.users += 1
                self._entries.move_to_end(session_key)
        if entry is None:
            entry = self._insert(session_key, self._factory(session_key))
        try:
            yield entry.agent
        finally:
            with self._guard:
                entry.users -= 1
                entry.used_at = self._clock()
                replaced = []
                if entry.stale and not entry.users and self._entries.get(session_key) is entry:
                    replaced.append(self._pop(session_key))
                gone = self._trim()
            self._release(replaced, "new")
            self._release(gone, "cap")

    def _insert(self, session_key: str, built: Agent) -> _Entry:
        extra: list[Agent] = []
        with self._guard:
            entry = self._entries.get(session_key)
            if entry is None:
                entry = self._entries[session_key] = _Entry(built, self._clock())
            else:
                extra.append(built)  # another thread built one meanwhile: ours goes
            entry.users += 1
            self._entries.move_to_end(session_key)
            replaced = self._replace(session_key)
            gone = self._trim()
        self._release(extra, "duplicate")
        self._release(replaced, "new")
        self._release(gone, "cap")
        return entry

    def _replace(self, session_key: str) -> list[Agent]:
        """Under the lock: a newer generation of a chat (/new) ends its older session's agent
        (released fully; once its turn lets go, if one holds it)."""
        chat, generation = split_session(session_key)
        older = self._current.get(chat)
        if older is not None and split_session(older)[1] > generation:
            return []  # a late turn of an old session: the newer one stays current
        self._current[chat] = session_key
        old = self._entries.get(older) if older not in (None, session_key) else None
        if old is None:
            return []
        if old.users:
            old.stale = True
            return []
        del self._entries[older]  # type: ignore[arg-type]
        return [old.agent]

    def _pop(self, session_key: str) -> Agent:
        """Under the lock: drop one entry (and its chat's pointer to it)."""
        chat, _ = split_session(session_key)
        if self._current.get(chat) == session_key:
            del self._current[chat]
        return self._entries.pop(session_key).agent

    def _trim(self) -> list[Agent]:
        """Under the lock: drop least recently used agents nobody holds, down to the cap.
        When every agent is held the cache stays over its cap (said once)."""
        gone: list[Agent] = []
        while len(self._entries) > self.cap:
            key = next((k for k, e in self._entries.items() if e.users == 0), None)
            if key is None:
                if not self._warned_full:
                    self._warned_full = True
                    logger.warning("agent cache over its cap (%d): every agent is in use by "
                                   "a running turn", self.cap)
                break
            gone.append(self._pop(key))
        return gone

    def sweep_idle(self) -> int:
        """Let go of agents nobody used for `idle_ttl_s`; returns how many."""
        deadline = self._clock() - self.idle_ttl_s
        with self._guard:
            idle = [k for k, e in self._entries.items() if e.users == 0 and e.used_at < deadline]
            gone = [self._pop(k) for k in idle]
        self._release(gone, "idle")
        return len(gone)

    def _release(self, agents: list[Agent], cause: str) -> None:
        for agent in agents:
            self.evictions[cause] += 1
            self.lane.submit(agent, cause)

    def close(self, timeout_s: float) -> int:
        """Worker shutdown: let go of every agent (fully released) and wait up to
        `timeout_s` for the releases; returns how many did not finish in time (logged)."""
        with self._guard:
            gone = [entry.agent for entry in self._entries.values()]
            self._entries.clear()
            self._current.clear()
            sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.stop(0)
        self._release(gone, "shutdown")
        began = time.monotonic()
        left = self.lane.drain(timeout_s) if gone else 0
        if left:
            logger.warning("agent cache: %d of %d agents not released within %.1fs; leaving "
                           "them", left, len(gone), timeout_s)
        elif gone:
            logger.info("agent cache: released %d agents in %.2fs", len(gone),
                        time.monotonic() - began)
        return left

    def _ensure_sweeping(self) -> None:
        """The idle sweep runs on its own thread, started on first use (after a fork)."""
        sweeper = self._sweeper
        if sweeper is not None and sweeper.alive:
            return
        with self._guard:
            if self._sweeper is None or not self._sweeper.alive:
                every_s = max(1.0, min(60.0, self.idle_ttl_s / 2))
                self._sweeper = Periodic("gateway-agent-sweep", self.sweep_idle, every_s).start()

"""Agents per worker process: an LRU map session key → agent, bounded by a cap, that never
lets go of an agent a running turn holds, and hands every agent it lets go to the process's
release lane (gateway/agents/release.py), so a slow release never holds the cache's lock,
a turn, a heartbeat or an ACK.

An agent is reused only while it is still right for its session: built under the same
configuration (the factory's `signature(context)`, when it has one), for the session's current
generation (/new starts a new one), and the last to run a turn of it (when another
process ran the session's previous turn, this agent missed that turn). Anything else is
let go and a new agent built. The lock is held for dictionary work only, never across a
build or a release. With prefork each pool process has its own cache and lane; with
threads, the threads of a process share them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from gateway.agents.release import HARD, ReleaseLane
from gateway.core.loops import Periodic
from gateway.core.model import Agent, AgentContext, AgentFactory

logger = logging.getLogger(__name__)

__all__ = ["HARD", "SCOPES", "AgentCache", "ReleaseLane", "conversation_of", "session_key",
           "split_session"]


@dataclass
class _Entry:
    agent: Agent
    used_at: float
    signature: str
    users: int = 0
    retired: str = ""
    """Why it was let go while a turn held it: released (for this cause) once let go."""


def session_key(chat_id: str, generation: int) -> str:
    """Agents are cached per session; /new starts a new generation, hence a new session."""
    return f"{chat_id}#{generation}"


SCOPES = ("chat", "user", "thread")


def conversation_of(chat_id: str, scope: str, *, chat_type: str = "", sender: str = "",
                    thread_id: str = "") -> str:
    """Whose conversation a turn continues (FEISHU_SESSION_SCOPE): the chat's; in a group
    each user's own (`user`); each thread's own (`thread`, the chat's outside threads).
    `chat_id` is the turn's state id: a topic's own (`oc_…/omt_…`) under the order scope
    `thread`, already a conversation apart."""
    if scope == "user" and chat_type == "group" and sender:
        return f"{chat_id}/{sender}"
    if scope == "thread" and thread_id and not chat_id.endswith(f"/{thread_id}"):
        return f"{chat_id}/{thread_id}"
    return chat_id


def split_session(key: str) -> tuple[str, int]:
    """`session_key`'s inverse; a key without a generation is generation 0."""
    chat, _, generation = key.rpartition("#")
    if not chat or not generation.isdigit():
        return key, 0
    return chat, int(generation)


def _no_signature() -> str:
    return ""


class AgentCache:
    def __init__(self, factory: AgentFactory, cap: int, *, context: AgentContext,
                 idle_ttl_s: float = 3600.0, lane: ReleaseLane | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._factory = factory
        self._context = context
        """What the factory is handed with every build (and its `signature`)."""
        signature = getattr(factory, "signature", None)
        self.signature: Callable[[], str] = partial(signature, context) if callable(
            signature) else _no_signature
        """The configuration agents are built under (the factory's `signature(context)`)."""
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
        """Agents let go, by cause: `cap`, `idle`, `config`, `missed`, `new`, `duplicate`,
        `shutdown`."""
        self.built = 0

    def __len__(self) -> int:
        return len(self._entries)

    @contextmanager
    def hold(self, session_key: str, *, missed: bool = False) -> Iterator[Agent]:
        """The session's agent (built on first use, outside the lock), kept from eviction
        until the block ends. `missed`: another process ran the session's previous turn, so
        a cached agent is out of date."""
        self._ensure_sweeping()
        signature = self.signature()
        with self._guard:
            entry = self._entries.get(session_key)
            outdated = []
            if entry is not None:
                cause = "config" if entry.signature != signature else "missed" if missed else ""
                if cause:
                    outdated = self._retire(session_key, cause)
                    entry = None
                else:
                    entry.users += 1
                    self._entries.move_to_end(session_key)
        self._release(outdated)
        if entry is None:
            with self._guard:
                self.built += 1
            entry = self._insert(session_key, self._factory(session_key, self._context),
                                 signature)
        try:
            yield entry.agent
        finally:
            with self._guard:
                entry.users -= 1
                entry.used_at = self._clock()
                done = [(entry.agent, entry.retired, session_key)] if (
                    entry.retired and not entry.users) else []
                gone = self._trim()
            self._release(done + gone)

    def _insert(self, session_key: str, built: Agent, signature: str) -> _Entry:
        with self._guard:
            entry = self._entries.get(session_key)
            extra = []
            if entry is None or entry.signature != signature:
                extra = self._retire(session_key, "config") if entry is not None else []
                entry = self._entries[session_key] = _Entry(built, self._clock(), signature)
            else:
                extra = [(built, "duplicate", session_key)]  # another thread built one meanwhile
            entry.users += 1
            self._entries.move_to_end(session_key)
            replaced = self._replace(session_key)
            gone = self._trim()
        self._release(extra + replaced + gone)
        return entry

    def _replace(self, session_key: str) -> list[tuple[Agent, str, str]]:
        """Under the lock: a newer generation of a chat (/new) ends its older session's agent
        (released fully; once its turn lets go, if one holds it)."""
        chat, generation = split_session(session_key)
        older = self._current.get(chat)
        if older is not None and split_session(older)[1] > generation:
            return []  # a late turn of an old session: the newer one stays current
        self._current[chat] = session_key
        if older is None or older == session_key or older not in self._entries:
            return []
        return self._retire(older, "new")

    def _retire(self, session_key: str, cause: str) -> list[tuple[Agent, str, str]]:
        """Under the lock: drop an entry; its agent is released now, or, while a turn holds
        it, when that turn lets go."""
        chat, _ = split_session(session_key)
        if self._current.get(chat) == session_key:
            del self._current[chat]
        entry = self._entries.pop(session_key)
        if entry.users:
            entry.retired = cause
            return []
        return [(entry.agent, cause, session_key)]

    def _trim(self) -> list[tuple[Agent, str, str]]:
        """Under the lock: drop least recently used agents nobody holds, down to the cap.
        When every agent is held the cache stays over its cap (said once)."""
        gone: list[tuple[Agent, str, str]] = []
        while len(self._entries) > self.cap:
            key = next((k for k, e in self._entries.items() if e.users == 0), None)
            if key is None:
                if not self._warned_full:
                    self._warned_full = True
                    logger.warning("agent cache over its cap (%d): every agent is in use by "
                                   "a running turn", self.cap)
                break
            gone += self._retire(key, "cap")
        return gone

    def sweep_idle(self) -> int:
        """Let go of agents nobody used for `idle_ttl_s`, and of idle ones built under a
        configuration that changed since; returns how many."""
        deadline = self._clock() - self.idle_ttl_s
        signature = self.signature()
        gone: list[tuple[Agent, str, str]] = []
        with self._guard:
            for key, entry in list(self._entries.items()):
                if entry.users == 0 and entry.used_at < deadline:
                    gone += self._retire(key, "idle")
                elif entry.users == 0 and entry.signature != signature:
                    gone += self._retire(key, "config")
        self._release(gone)
        return len(gone)

    def _release(self, agents: list[tuple[Agent, str, str]], *, direct: bool = False) -> None:
        if not agents:
            return
        with self._guard:
            for _, cause, _ in agents:
                self.evictions[cause] += 1
        for agent, cause, key in agents:
            self.lane.submit(agent, cause, key, direct=direct)

    def retire(self, session_key: str, cause: str) -> bool:
        """Let go of the session's agent now (or once its turn lets go): e.g. a turn that
        did not ask it (a kept answer resent) while another process ran the one before."""
        with self._guard:
            if session_key not in self._entries:
                return False
            gone = self._retire(session_key, cause)
        self._release(gone)
        return True

    def stats(self) -> dict[str, Any]:
        """What `feishu-gateway status` shows of this process's agents."""
        with self._guard:
            size, held = len(self._entries), sum(1 for e in self._entries.values() if e.users)
            built, evictions = self.built, dict(self.evictions)
        released = self.lane.counts()
        return {"size": size, "cap": self.cap, "held": held, "built": built,
                "evictions": evictions,
                "soft": sum(n for c, n in released.items() if c not in HARD
                            and c not in ("failed", "in-place")),
                "hard": sum(n for c, n in released.items() if c in HARD),
                "failed": released.get("failed", 0), "in_place": released.get("in-place", 0),
                "parked": self.lane.parked, "release_s_max": round(self.lane.release_s_max, 3),
                "release_s_total": round(self.lane.release_s_total, 3),
                "signature": self.signature()}

    def close(self, timeout_s: float) -> int:
        """Worker shutdown: let go of every agent (fully released, here: the release queue
        is no longer consumed) and wait up to `timeout_s` for the releases; returns how many
        did not finish in time (logged)."""
        with self._guard:
            gone = [(e.agent, "shutdown", k) for k, e in self._entries.items()]
            self._entries.clear()
            self._current.clear()
            sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.stop(0)
        began = time.monotonic()
        total = len(gone) + self.lane.release_parked("shutdown")  # those waiting for a task
        self._release(gone, direct=True)  # no tasks: the release queue is no longer consumed
        left = self.lane.drain(timeout_s)  # (also one that was running already)
        if left:
            logger.warning("agent cache: %d of %d agents not released within %.1fs; leaving "
                           "them", left, total, timeout_s)
        elif total:
            logger.info("agent cache: released %d agents in %.2fs", total,
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

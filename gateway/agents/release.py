"""Letting agents go, off every hot path: the release lane of one worker process.

An agent the cache lets go is parked here under a token, and a `gateway.release_agent` task
is sent for it on the low-priority release queue (its own queue: turns never wait behind
it). Whichever worker runs that task hands the token back to the owning process: at once
when the task runs in that very process, else through a short Redis list that the owner
reads while it has agents parked. The owner's lane thread then releases the agent, so a
release always runs in the process that built the agent, on a thread of its own: never
under the cache's lock, never in a worker slot, never on a turn's, heartbeat's or ACK's
path. Should no task come within `fallback_s` (the broker is down, nothing consumes the
release queue), the lane releases the agent anyway: every agent let go is released exactly
once. Worker shutdown releases what is left here directly (the consumer has stopped).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.core.loops import describe
from gateway.core.model import Agent

logger = logging.getLogger(__name__)

HARD = frozenset({"shutdown", "new", "duplicate"})
"""Causes that tear an agent down (`release()`); the others keep what a session's next
agent inherits (`soft_release()`)."""

POLL_S = 0.2
"""How often an owner with agents parked reads the tokens handed back to it."""
SLOW_RELEASE_S = 1.0
"""A release that takes longer is logged at INFO."""


@dataclass(frozen=True, slots=True)
class Parcel:
    """What a `release_agent` task carries: which process owns the agent, its token there,
    why it is let go and whose agent it was (for the operator)."""

    owner: str
    token: str
    cause: str
    session: str


class ReleasePost(Protocol):
    """How parcels travel between processes (gateway/broker/release_post.py)."""

    def send(self, parcel: Parcel) -> None:
        """Send the parcel's `release_agent` task."""

    def take(self, owner: str) -> list[str]:
        """The tokens handed back to `owner` by tasks that ran in other processes."""


@dataclass
class _Parked:
    agent: Agent
    cause: str
    session: str
    parked_at: float


@dataclass
class ReleaseLane:
    """One process's releases, one after another on a daemon thread (started on first use,
    so a forked pool process starts its own). Without a `post` (tests, the CLI) an agent is
    released right away on the lane."""

    owner: str = ""
    post: ReleasePost | None = None
    fallback_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    name: str = "gateway-agent-release"
    released: Counter[str] = field(default_factory=Counter)
    """Releases done, by cause; `failed` counts the ones that raised, `in-place` the ones
    whose task did not come in time."""
    release_s_max: float = 0.0
    release_s_total: float = 0.0

    def __post_init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._guard = threading.Condition()
        self._parked: dict[str, _Parked] = {}
        self._pending = 0
        """Agents submitted and not yet released (parked or about to be)."""
        self._thread: threading.Thread | None = None
        self._outbox: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        """Sends the tasks on a thread of its own: a broker that hangs never holds up a
        release, the reading of handed-back tokens or the in-place fallback."""
        self._polled_at = 0.0

    @property
    def parked(self) -> int:
        with self._guard:
            return len(self._parked)

    def submit(self, agent: Agent, cause: str, session: str = "", *,
               direct: bool = False) -> None:
        """Let `agent` go: released fully (`release()`) for a cause in HARD, else softly,
        once its task comes back (at once without a post, or `direct`: at shutdown)."""
        token = uuid.uuid4().hex[:12]
        with self._guard:
            self._pending += 1  # counted before the lane can see it, so drain() never misses it
            self._parked[token] = _Parked(agent, cause, session, self.clock())
            if self.post is None or direct:
                self._jobs.put(("release", token))
            else:
                self._outbox.put(token)
                self._jobs.put(("wake", token))  # the lane now reads handed-back tokens
                if self._sender is None or not self._sender.is_alive():
                    self._sender = threading.Thread(target=self._send_all, daemon=True,
                                                    name=f"{self.name}-tasks")
                    self._sender.start()
            self._ensure_thread()

    def deliver(self, token: str) -> bool:
        """A `release_agent` task for this process: release its agent soon (on the lane).
        False when the token is not parked here (released already, or not this process's)."""
        with self._guard:
            if token not in self._parked:
                return False
            self._jobs.put(("release", token))
            self._ensure_thread()
            return True

    def release_parked(self, cause: str = "shutdown") -> int:
        """Worker shutdown: everything parked is released now, on the lane, fully; returns
        how many."""
        with self._guard:
            for token, parked in self._parked.items():
                parked.cause = cause
                self._jobs.put(("release", token))
            if self._parked:
                self._ensure_thread()
            return len(self._parked)

    @property
    def pending(self) -> int:
        """Agents let go and not released yet."""
        with self._guard:
            return self._pending

    def counts(self) -> dict[str, int]:
        """A copy of `released`, safe while the lane counts."""
        with self._guard:
            return dict(self.released)

    def drain(self, timeout_s: float) -> int:
        """Wait until every submitted release is done, up to `timeout_s`; how many are not."""
        with self._guard:
            self._guard.wait_for(lambda: self._pending == 0, timeout_s)
            return self._pending

    def _ensure_thread(self) -> None:
        """Under the guard."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._guard:
                waiting = bool(self._parked)
            try:
                job: tuple[str, str] | None = self._jobs.get(timeout=POLL_S if waiting else None)
            except queue.Empty:
                job = None
            try:
                if job is not None:
                    self._handle(*job)
                if waiting:
                    self._collect()
            except Exception as error:  # noqa: BLE001 (a thread's boundary: it must go on)
                logger.error("%s: step failed, going on: %s", self.name, describe(error))

    def _handle(self, what: str, token: str) -> None:
        if what == "release":
            self._release(token)

    def _send_all(self) -> None:
        while True:
            token = self._outbox.get()
            with self._guard:
                parked = self._parked.get(token)
            if parked is None or self.post is None:
                continue  # released meanwhile (shutdown)
            try:
                self.post.send(Parcel(self.owner, token, parked.cause, parked.session))
            except Exception as error:  # noqa: BLE001 (any broker error: released in place later)
                logger.warning("agent release task for %s not sent (%s); it is released here "
                               "within %.0fs", parked.session or "an agent", describe(error),
                               self.fallback_s)

    def _collect(self) -> None:
        """Tokens handed back by other processes' tasks, and parcels whose task is overdue."""
        now, tick = self.clock(), time.monotonic()
        if tick - self._polled_at >= POLL_S and self.post is not None:
            self._polled_at = tick
            for _ in range(50):  # until none is left (a batch at a time), within bounds
                try:
                    tokens = self.post.take(self.owner)
                except Exception as error:  # noqa: BLE001 (Redis away: the fallback covers it)
                    logger.debug("release tokens not read: %s", describe(error))
                    break
                if not tokens:
                    break
                for token in tokens:
                    self._release(token)
        with self._guard:
            overdue = [t for t, p in self._parked.items() if now - p.parked_at >= self.fallback_s]
        for token in overdue:
            logger.info("agent release task did not come within %.0fs: released in place",
                        self.fallback_s)
            self._release(token, in_place=True)

    def _release(self, token: str, *, in_place: bool = False) -> None:
        with self._guard:
            parked = self._parked.pop(token, None)
        if parked is None:
            return  # released already: a task and the fallback raced, or a task came twice
        try:
            self._call_hook(parked, in_place)
        finally:
            with self._guard:
                self._pending -= 1
                self._guard.notify_all()

    def _call_hook(self, parked: _Parked, in_place: bool) -> None:
        cause = parked.cause
        hook = "release" if cause in HARD else "soft_release"
        release: Callable[[], object] | None = getattr(parked.agent, hook, None)
        if release is None and cause in HARD:
            release = getattr(parked.agent, "soft_release", None)
        began = time.monotonic()
        try:
            if callable(release):
                release()
        except Exception as error:  # noqa: BLE001 (a thread's boundary: it must go on)
            with self._guard:
                self.released["failed"] += 1
            logger.warning("agent release (%s) of %s failed: %s", cause,
                           parked.session or "an agent", describe(error))
            return
        took = time.monotonic() - began
        with self._guard:
            self.released[cause] += 1
            if in_place:
                self.released["in-place"] += 1
            self.release_s_total += took
            self.release_s_max = max(self.release_s_max, took)
        level = logging.INFO if took >= SLOW_RELEASE_S else logging.DEBUG
        logger.log(level, "agent of %s released (%s) in %.3fs", parked.session or "a session",
                   cause, took)

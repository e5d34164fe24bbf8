"""The steps an agent reports with `Turn.progress`: the current one, shown above the answer
while it streams, and the finished ones, listed with their times when it ends.

A step is one line of at most STEP_MAX_CHARS (whitespace folded, cut with "…"); the same
step twice in a row counts once; a turn keeps its last STEPS_KEPT steps (and counts the
rest), so an agent that reports every tool call cannot grow a card past Feishu's limits.
Thread-safe: an agent may report from any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

STEP_MAX_CHARS = 80
STEPS_KEPT = 30


def shorten(text: object, limit: int = STEP_MAX_CHARS) -> str:
    """`text` as one line of at most `limit` characters (pure)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class Step:
    text: str
    took_s: float


@dataclass(frozen=True, slots=True)
class Done:
    """The finished steps of a turn: what the closed card lists."""

    steps: tuple[Step, ...]
    dropped: int
    """Earlier steps not kept (past STEPS_KEPT)."""
    elapsed_s: float
    """From the first step to the end."""


class Steps:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._steps: list[tuple[str, float]] = []
        self._dropped = 0
        self._first: float | None = None

    def add(self, text: object) -> bool:
        """A new current step; False when it changes nothing (empty, or the current one)."""
        step = shorten(text)
        with self._lock:
            if not step or (self._steps and self._steps[-1][0] == step):
                return False
            now = self._clock()
            if self._first is None:
                self._first = now
            self._steps.append((step, now))
            if len(self._steps) > STEPS_KEPT:
                del self._steps[0]
                self._dropped += 1
            return True

    @property
    def current(self) -> str:
        with self._lock:
            return self._steps[-1][0] if self._steps else ""

    def done(self) -> Done | None:
        """Every step finished now; None when none was reported."""
        with self._lock:
            if self._first is None:
                return None
            now = self._clock()
            ends = [began for _, began in self._steps[1:]] + [now]
            steps = tuple(Step(text, max(end - began, 0.0))
                          for (text, began), end in zip(self._steps, ends, strict=True))
            return Done(steps, self._dropped, max(now - self._first, 0.0))

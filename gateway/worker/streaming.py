"""A streamed answer shown as it grows on one surface per answered message (a CardKit card,
or a text or post message edited in place: gateway/worker/surfaces.py), at most once per
FEISHU_STREAM_INTERVAL_MS while the agent writes, then replaced by the final text (or the
text so far with a "stopped" or "failed" mark).

Updates while streaming draw from the quota at the low priority and a failed one is skipped
(the next carries the whole text). While replies wait for the send quota, updates yield to
them: each skipped update doubles the time to the next (up to COARSEST times the interval),
and one shown brings the interval back. When no surface can be made at all, the answer goes
out as ordinary replies once it is complete.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gateway.core.errors import GatewayError
from gateway.worker.surfaces import Surface

logger = logging.getLogger(__name__)

STOPPED_MARK = "⏹ Stopped."
INTERRUPTED_MARK = "⏹ Interrupted by your next message: answering them together."
FAILED_MARK = "⚠ The answer broke off here."
COARSEST = 8
"""Skipped updates stretch the interval to at most this many times FEISHU_STREAM_INTERVAL_MS."""


@dataclass
class Throttle:
    """At most one update per `interval_s` (the first is due at once), stretched while
    updates are skipped (`missed`) and back once one is shown (`shown`). Pure."""

    interval_s: float
    _last: float = field(default=float("-inf"))
    _stretch: int = 1

    @property
    def current_s(self) -> float:
        return self.interval_s * self._stretch

    def due(self, now: float) -> bool:
        if now - self._last < self.current_s:
            return False
        self._last = now
        return True

    def missed(self) -> None:
        self._stretch = min(self._stretch * 2, COARSEST)

    def shown(self) -> None:
        self._stretch = 1


class Stream:
    """One turn's streamed answer. Not thread-safe: the turn's thread only."""

    def __init__(self, surface: Surface, *, what: str, interval_s: float, limit_chars: int,
                 stopped: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.surface, self._what = surface, what
        self._stopped, self._clock = stopped, clock
        self._throttle = Throttle(interval_s)
        self._limit = limit_chars
        self.opened = False
        self.broken = False
        """No surface could be made: the answer goes out as ordinary replies."""
        self.text = ""

    @property
    def live(self) -> bool:
        """A surface shows (part of) the answer."""
        return self.opened and not self.broken

    @property
    def updates(self) -> int:
        return self.surface.updates

    def consume(self, pieces: Iterable[str]) -> str:
        """Join the agent's pieces, showing the text as it grows; stops early when the
        turn is stopped. Returns the text (so far)."""
        for piece in pieces:
            self.text += str(piece)
            if self._stopped.is_set():
                break
            if not self.broken and self.text.strip() and self._throttle.due(self._clock()):
                self._show(self.text)
        return self.text

    def _visible(self, text: str) -> str:
        return text if len(text) <= self._limit else text[:self._limit].rstrip() + " …"

    def _open(self, text: str) -> bool:
        try:
            fresh = self.surface.open(self._visible(text) or "…")
        except GatewayError as error:
            logger.warning("no streaming surface for %s (%s); the answer is sent when it is "
                           "complete", self._what, error)
            self.broken = True
            return False
        self.opened = True
        return fresh

    def _show(self, text: str) -> None:
        if not self.opened and self._open(text):
            return  # the new surface was made with this text
        if not self.broken:
            if self.surface.update(self._visible(text)):
                self._throttle.shown()
            else:
                self._throttle.missed()

    def close(self, text: str, mark: str = "") -> bool:
        """Show `text` as the final content (with `mark` under it), streaming off. True
        when the surface shows it; False when there is none (then the caller sends the text
        as ordinary replies)."""
        if not self.opened and not self.broken:
            self._open(text)
        if self.broken:
            return False
        return self.surface.finish(self._visible(text) or "…", mark)

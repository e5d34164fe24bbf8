"""A streamed answer shown as it grows on one surface per answered message (a CardKit card,
or a text or post message edited in place: gateway/worker/surfaces.py), at most once per
FEISHU_STREAM_INTERVAL_MS (never faster than 10 a second) while the agent writes or reports
progress steps (`Turn.progress`, gateway/worker/progress.py: the current step shows as a
line above the text), then replaced by the final text (or the text so far with a "stopped"
or "failed" mark) and the list of finished steps.

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
from gateway.feishu.outbound.chunking import MAX_BYTES, fits_within
from gateway.feishu.outbound.stream_card import with_step
from gateway.worker.progress import Steps
from gateway.worker.surfaces import Surface

logger = logging.getLogger(__name__)

FAILED_MARK = "⚠ The answer broke off here."
MIN_INTERVAL_S = 0.12
"""Feishu takes at most 10 operations per second on one card, whatever
FEISHU_STREAM_INTERVAL_MS says."""
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

    def wait_s(self, now: float) -> float:
        """How long until the next update is due."""
        return max(self._last + self.current_s - now, 0.0)

    def missed(self) -> None:
        self._stretch = min(self._stretch * 2, COARSEST)

    def shown(self) -> None:
        self._stretch = 1


class Stream:
    """One turn's streamed answer and its progress steps. Thread-safe: the turn's thread
    feeds the pieces, an agent may report steps from any thread; one lock orders every
    surface call (so an update is never sent twice at once, nor after the close). A step or
    piece that comes while the throttle holds is shown once the interval allows it."""

    def __init__(self, surface: Surface, *, what: str, interval_s: float, limit_chars: int,
                 stopped: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.surface, self._what = surface, what
        self._stopped, self._clock = stopped, clock
        self._throttle = Throttle(max(interval_s, MIN_INTERVAL_S))
        self._limit = limit_chars
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._shown = ""
        self._closed = False
        self.steps = Steps(clock)
        self.opened = False
        self.broken = False
        """No surface could be made: the answer goes out as ordinary replies."""
        self.text = ""
        self.cut = False
        """The stop cut the agent's pieces short: the text is partial."""

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
            with self._lock:
                self.text += str(piece)
                if self._stopped.is_set():
                    self.cut = True
                    break
                self._maybe_show()
        return self.text

    def progress(self, step: str) -> None:
        """`Turn.progress`: a new current step, shown with the answer so far (opening the
        surface when nothing showed yet). A no-op once closed or stopped."""
        with self._lock:
            if self._closed or self._stopped.is_set() or not self.steps.add(step):
                return
            self._maybe_show()

    def _display(self) -> str:
        return with_step(self._visible(self.text), self.steps.current)

    def _maybe_show(self) -> None:
        """Show the text (and step) now if the throttle allows, else once it does."""
        if self.broken or self._closed or self._stopped.is_set():
            return
        display = self._display()
        if not display.strip() or display == self._shown:
            return
        if self._throttle.due(self._clock()):
            self._show(display)
        elif self._timer is None:
            self._timer = threading.Timer(self._throttle.wait_s(self._clock()), self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            self._maybe_show()

    def _visible(self, text: str) -> str:
        shown = fits_within(text, self._limit, MAX_BYTES)  # (Feishu's 30 KB a card)
        return text if shown >= len(text) else text[:shown].rstrip() + " …"

    def _open(self, text: str) -> bool:
        try:
            fresh = self.surface.open(text or "…")
        except GatewayError as error:
            logger.warning("no streaming surface for %s (%s); the answer is sent when it is "
                           "complete", self._what, error)
            self.broken = True
            return False
        self.opened = True
        return fresh

    def _show(self, display: str) -> None:
        self._shown = display
        if not self.opened and self._open(display):
            return  # the new surface was made with this text
        if not self.broken:
            if self.surface.update(display):
                self._throttle.shown()
            else:
                self._throttle.missed()

    def handed_over(self, note: str) -> bool:
        """The turn goes to another worker (this one is leaving): the text so far with
        `note` under it, the surface left streaming for the re-run, which takes it up and
        replaces the text (one attempt, as the process leaves). True when it shows."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self.opened or self.broken:
                return False
            text = self._visible(self.text)
            return self.surface.update(f"{text}\n\n{note}" if text.strip() else note)

    def close(self, text: str, mark: str = "") -> bool:
        """Show `text` as the final content (with the finished steps and `mark` under it),
        streaming off. True when the surface shows it; False when there is none (then the
        caller sends the text as ordinary replies)."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self.opened and not self.broken:
                self._open(self._visible(text))
            if self.broken:
                return False
            return self.surface.finish(self._visible(text) or "…", mark, self.steps.done())

"""Feishu's automatic redelivery of events whose frames got no ACK with code 200 (in
webhook mode: whose pushes got no HTTP 200), on its schedule: 15 s after the first try,
then 5 min, 1 h and 6 h after the one before, then never (a test shortens it)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.simulator.config import FEISHU_REDELIVERY_S
from gateway.simulator.server import Hub
from gateway.simulator.state import SimState

logger = logging.getLogger(__name__)

ACK_OK = 200
Push = Callable[..., Awaitable[None]]
"""Delivers one frame: the hub's `deliver`, or the webhook pusher's."""
LAST_ACK_WAIT_S = 10.0
"""After the last redelivery, how long its ACK is still waited for (then it is given up)."""
REDELIVERIES = "redeliveries"
MISSED = "redeliveries-missed"
WATCHED = "redelivery-watched"


@dataclass(frozen=True)
class RedeliveryPolicy:
    """When an event none of whose frames got a 200 goes again: `schedule_s[n]` seconds after
    the try before it (Feishu: FEISHU_REDELIVERY_S), then never; `()`: never."""

    schedule_s: tuple[float, ...] = FEISHU_REDELIVERY_S

    @property
    def on(self) -> bool:
        return bool(self.schedule_s)

    @property
    def attempts(self) -> int:
        return len(self.schedule_s)

    def delay_s(self, attempt: int) -> float:
        """How long after the try before it the try `attempt` (0: the first retry) goes;
        after the last one, how long an ACK is still waited for."""
        return self.schedule_s[min(attempt, len(self.schedule_s) - 1)]

    def __post_init__(self) -> None:
        if any(not delay > 0 for delay in self.schedule_s):
            raise ValueError("every delay of a redelivery schedule must be positive")


@dataclass(eq=False)
class _Event:
    """One event (one payload, one event_id) and every frame that carried it."""

    key: str
    payload: bytes
    frame_type: str
    parts: int
    message_id: str | None
    app_id: str | None = None
    card_message_id: str | None = None
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Redeliverer:
    """Delivers frames through the hub and watches each event until a frame of it is
    ACKed with code 200. Lives on the simulator loop: every method runs there."""

    def __init__(self, hub: Hub, state: SimState, policy: RedeliveryPolicy, *,
                 push: Push | None = None) -> None:
        self.hub, self.state, self.policy = hub, state, policy
        self._push: Push = push or hub.deliver
        self._events: dict[str, _Event] = {}
        self._frame_event: dict[str, str] = {}
        hub.ack_listener = self.on_ack

    async def deliver(self, payload: bytes, *, frame_id: str, event_key: str, frame_type: str,
                      parts: int, message_id: str | None, timeout_s: float,
                      app_id: str | None = None, card_message_id: str | None = None) -> None:
        """Deliver one frame now to a client of `app_id` (raising as the hub does), then
        watch its event; redeliveries go to the same app."""
        event = self._events.get(event_key)
        if event is None:
            event = _Event(event_key, payload, frame_type, parts, message_id, app_id,
                           card_message_id)
            self._events[event_key] = event
        self._frame_event[frame_id] = event_key  # before sending: the ACK may come first
        await self._push(payload, frame_id=frame_id, frame_type=frame_type, parts=parts,
                         timeout_s=timeout_s, app_id=app_id)
        idle = event.task is None or event.task.done()
        if self.policy.on and idle and not event.settled.is_set():
            self.state.bump(WATCHED)
            event.task = asyncio.get_running_loop().create_task(
                self._watch(event), name=f"redeliver-{event_key}")

    def on_ack(self, frame_id: str, code: int) -> None:
        key = self._frame_event.get(frame_id)
        if key is not None and code == ACK_OK:
            self._events[key].settled.set()

    async def _watch(self, event: _Event) -> None:
        """Redeliver on the schedule while no frame got a 200 ACK; after the last try, wait
        a little for its ACK before giving up (so "watched" means "still in flight")."""
        try:
            for attempt in range(self.policy.attempts + 1):
                last = attempt == self.policy.attempts
                wait_s = min(self.policy.delay_s(attempt), LAST_ACK_WAIT_S) if last \
                    else self.policy.delay_s(attempt)
                try:
                    await asyncio.wait_for(event.settled.wait(), wait_s)
                    return
                except TimeoutError:
                    pass
                if last:
                    logger.warning("event %s got no 200 ACK after %d redeliveries; Feishu "
                                   "gives up", event.key, attempt)
                    return
                try:
                    await self._redeliver(event)
                except Exception:  # never fatal: the next attempt may work
                    logger.exception("automatic redelivery of event %s failed", event.key)
        finally:
            self.state.bump(WATCHED, -1)

    async def _redeliver(self, event: _Event) -> None:
        """One try: to a client of the event's app connected now. With none (long
        connection), the try is lost, as Feishu's is: it counts, and the next may reach one
        (after the last, the event reaches the bot never: catch-up reads it back)."""
        frame_id = uuid.uuid4().hex
        self.state.record_frame(frame_id, event.payload, event.message_id, event.key,
                                app_id=event.app_id, card_message_id=event.card_message_id)
        self._frame_event[frame_id] = event.key
        try:
            await self._push(event.payload, frame_id=frame_id, frame_type=event.frame_type,
                             parts=event.parts, timeout_s=0.0, app_id=event.app_id)
        except TimeoutError:
            self.state.bump(MISSED)
            logger.info("redelivery of event %s found no connected client: that try is lost",
                        event.key)
            return
        self.state.bump(REDELIVERIES)
        logger.info("redelivered event %s as frame %s", event.key, frame_id)

    async def close(self) -> None:
        """Stop watching every event (on simulator shutdown)."""
        tasks = [e.task for e in self._events.values() if e.task is not None and not e.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

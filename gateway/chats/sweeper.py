"""Re-dispatches chats whose lease is gone or whose turn waited too long in the broker.

That is how a SIGKILLed worker (whatever its turn was doing: running, reserved, prefetched),
a lost publish or a listener that died between its Redis step and the publish heal: within
the lease TTL (a lost publish: the claim TTL) plus one sweep. Every listener and worker runs
a sweeper; they split the work: each batch of due chats is taken by one sweeper only
(`due.lua` hides it from the others), and each recovery is one atomic script, with deadlines
read on the Redis server's clock. A running turn's heartbeat keeps its chat out of the due
set, so sweepers only ever look at chats that need them. A full batch is followed by the
next one at once, so a mass outage (100,000 chats whose leases expired together) is
recovered at the speed of the broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Protocol

from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.core.forks import ForkGate
from gateway.core.loops import Periodic

logger = logging.getLogger(__name__)

BATCH = 500
CLAIM_MS = 10_000
"""How long a batch of due chats stays hidden from other sweepers while one works on it."""
ROUND_BUDGET_S = 30.0


class Dispatcher(Protocol):
    """What a sweeper needs of the publisher (see gateway.broker.publisher.Publisher)."""

    def publish_many(self, turns: Sequence[TurnRef]) -> int: ...

    def backlog(self) -> int | None: ...


def sweep_batch(store: ChatStore, publisher: Dispatcher, limit: int = BATCH) -> tuple[int, bool]:
    """Recover one batch of due chats; returns (turns published, whether more may be due)."""
    chats, more = store.recovery.due_batch(limit, claim_ms=CLAIM_MS)
    if not chats:
        return 0, False
    backlog = publisher.backlog()
    found = store.recovery.recover_many(chats, may_requeue=not backlog)
    turns = []
    for chat_id, (kind, turn) in found.items():
        if kind == "requeue":
            logger.warning("chat %s: turn %s (fence %d) not picked up in time; published again",
                           chat_id, turn.message_id, turn.fence)
        else:
            logger.info("recovered chat %s: re-dispatching %s (fence %d)", chat_id,
                        turn.message_id, turn.fence)
        turns.append(turn)
    publisher.publish_many(turns)
    return len(turns), more


def sweep_once(store: ChatStore, publisher: Dispatcher, limit: int = BATCH,
               budget_s: float = ROUND_BUDGET_S, gate: ForkGate | None = None) -> int:
    """Batches until no chat is due (or `budget_s` ran out); returns turns (re)published.
    Each batch is a step of `gate` when given (a worker's main process)."""
    deadline = time.monotonic() + budget_s
    published = 0
    while True:
        with gate.step() if gate else nullcontext():
            count, more = sweep_batch(store, publisher, limit)
        published += count
        if not more or time.monotonic() >= deadline:
            return published


class Sweeper(Periodic):
    def __init__(self, store: ChatStore, publisher: Dispatcher, interval_s: float,
                 gate: ForkGate | None = None) -> None:
        super().__init__("gateway-sweeper", lambda: sweep_once(store, publisher, gate=gate),
                         interval_s)

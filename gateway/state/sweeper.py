"""Re-dispatches chats whose lease is gone or whose turn waited too long in the broker.

That is how a SIGKILLed worker (whatever its turn was doing: running, reserved, prefetched),
a lost publish or a listener that died between its Redis step and the publish heal: within
the lease TTL plus one sweep. Several sweepers may run at once (listeners, workers): each
recovery is one atomic script, and deadlines are read on the Redis server's clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.loops import Periodic
from gateway.state.store import ChatStore, Dispatch

logger = logging.getLogger(__name__)


def sweep_once(store: ChatStore, publish: Callable[[Dispatch], object],
               limit: int = 500) -> int:
    """One pass over the chats whose deadline passed; returns turns (re)published."""
    count = 0
    for chat_id in store.due_chats(limit):
        found = store.recover(chat_id)
        if found is None:
            continue
        kind, turn = found
        if kind == "requeue":
            logger.warning("chat %s: turn %s (fence %d) not picked up in time; published again",
                           chat_id, turn.message_id, turn.fence)
        else:
            logger.warning("recovered chat %s: re-dispatching %s (fence %d)", chat_id,
                           turn.message_id, turn.fence)
        publish(turn)
        count += 1
    return count


class Sweeper(Periodic):
    def __init__(self, store: ChatStore, publish: Callable[[Dispatch], object],
                 interval_s: float) -> None:
        super().__init__("gateway-sweeper", lambda: sweep_once(store, publish), interval_s)

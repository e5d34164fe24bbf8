"""Re-dispatches chats whose inbox is not empty and whose lease is gone.

That is how a SIGKILLed worker, a lost publish or a listener that died between
the ingest step and the publish heal: within lease TTL + one sweep interval.
Several sweepers may run at once (listeners, workers): recovery is atomic.
"""

from __future__ import annotations

import logging
import threading

import redis

from gateway.chats import ChatStore
from gateway.dispatch import Publisher

logger = logging.getLogger(__name__)


def sweep_once(store: ChatStore, publisher: Publisher, limit: int = 500) -> int:
    """One pass over the chats whose lease deadline passed; returns turns re-dispatched."""
    count = 0
    for chat_id in store.due_chats(limit):
        turn = store.recover(chat_id)
        if turn is not None:
            logger.warning("recovered chat %s: re-dispatching %s (fence %d)",
                           chat_id, turn.message_id, turn.fence)
            publisher.publish(turn)
            count += 1
    return count


class Sweeper:
    def __init__(self, store: ChatStore, publisher: Publisher, interval_s: float) -> None:
        self._store = store
        self._publisher = publisher
        self.interval_s = interval_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                sweep_once(self._store, self._publisher)
            except redis.RedisError as error:
                logger.warning("sweep skipped: redis unavailable (%s)", error)

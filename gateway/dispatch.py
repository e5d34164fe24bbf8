"""Publishing turns and notices to Celery. Never called on the SDK's event loop."""

from __future__ import annotations

import logging
from typing import Any, Literal, Protocol

import redis
from kombu.exceptions import KombuError

from gateway.chats import ChatStore, Dispatch
from gateway.names import RUN_TURN, TURNS_QUEUE, turn_task_id

logger = logging.getLogger(__name__)

BROKER_ERRORS = (KombuError, redis.RedisError, OSError)


class TaskSender(Protocol):
    """What we need of a Celery app: `send_task`, and `control` for revoke."""

    def send_task(self, name: str, *args: Any, **kwargs: Any) -> Any: ...

    @property
    def control(self) -> Any: ...


class Publisher:
    def __init__(self, sender: TaskSender, store: ChatStore) -> None:
        self._sender = sender
        self._store = store

    def publish(self, turn: Dispatch) -> bool:
        """Publish `run_turn`, then give its lease the queued TTL.

        A failed publish is only logged: the claim lease expires and the sweeper
        dispatches the chat again, so nothing is lost."""
        task_id = turn_task_id(turn.chat_id, turn.message_id, turn.fence)
        try:
            self._sender.send_task(
                RUN_TURN, task_id=task_id, queue=TURNS_QUEUE,
                kwargs={"chat_id": turn.chat_id, "message_id": turn.message_id,
                        "fence": turn.fence},
            )
        except BROKER_ERRORS:
            logger.exception("publish of %s failed; the sweeper will retry it", task_id)
            return False
        self._store.confirm(turn, task_id)
        return True

    def hand_over(self, turn: Dispatch) -> Dispatch | None | Literal[False]:
        """End `turn` (pop its head, claim the next) and publish the next turn, if any.
        Returns what `ChatStore.complete` said: the next turn, None (idle) or False (stale)."""
        following = self._store.complete(turn)
        if following:
            self.publish(following)
        return following

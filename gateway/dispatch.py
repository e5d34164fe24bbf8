"""Publishing turns and notices to Celery. Never called on the SDK's event loop."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import redis
from kombu.exceptions import KombuError

from gateway.chats import ChatStore, Dispatch
from gateway.names import CONTROL_QUEUE, NOTIFY, RUN_TURN, TURNS_QUEUE, turn_task_id

logger = logging.getLogger(__name__)

BROKER_ERRORS = (KombuError, redis.RedisError, OSError)


class TaskSender(Protocol):
    """What we need of a Celery app: `Celery.send_task`."""

    def send_task(self, name: str, *args: Any, **kwargs: Any) -> Any: ...


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

    def notify(self, chat_id: str, message_id: str, text: str, purpose: str) -> bool:
        """Ask a worker to tell the user something about one of their messages."""
        try:
            self._sender.send_task(
                NOTIFY, queue=CONTROL_QUEUE,
                kwargs={"chat_id": chat_id, "message_id": message_id, "text": text,
                        "purpose": purpose},
            )
        except BROKER_ERRORS:
            logger.exception("notice for %s in %s could not be published", message_id, chat_id)
            return False
        return True

"""Celery task and queue names, shared by the publisher side and the worker side, and what
the publisher side needs of a Celery app."""

from typing import Any, Protocol

RUN_TURN = "gateway.run_turn"
RELEASE_AGENT = "gateway.release_agent"
ON_REACTION = "gateway.on_reaction"
"""A reaction on an answer, for the agent factory's hook (gateway/worker/reaction_hook.py)."""
POST_MESSAGE = "gateway.post_message"
"""A message the bot starts (gateway/chats/outbound.py), for code and schedulers."""

TURNS_QUEUE = "gateway.turns"
RELEASE_QUEUE = "gateway.release"
"""Low priority: agent releases and reaction hooks, so no turn ever waits behind one."""
ALL_QUEUES = (TURNS_QUEUE, RELEASE_QUEUE)


class TaskSender(Protocol):
    """What we need of a Celery app: `send_task`, and `control` for revoke."""

    def send_task(self, name: str, *args: Any, **kwargs: Any) -> Any: ...

    @property
    def control(self) -> Any: ...

    def connection_or_acquire(self, connection: Any = None, pool: bool = True) -> Any: ...

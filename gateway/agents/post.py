"""How release parcels travel: the `release_agent` task on the release queue, and a short
Redis list per owning process for the tokens that a task run elsewhere hands back.

May import: gateway.agents.release, gateway.names, gateway.dispatch.
"""

from __future__ import annotations

from dataclasses import asdict

import redis

from gateway.agents.release import Parcel
from gateway.dispatch import TaskSender
from gateway.names import RELEASE_AGENT, RELEASE_QUEUE

TOKENS_TTL_S = 600
"""A handed-back token nobody reads (its owner died, its agent with it) expires."""
TAKE_AT_MOST = 100


def tokens_key(owner: str) -> str:
    return f"gw:release:{owner}"


class CeleryPost:
    def __init__(self, sender: TaskSender, client: redis.Redis, *, expires_s: float) -> None:
        """`expires_s`: a task not run by then is dropped by the worker that gets it (the
        owner released the agent in place meanwhile)."""
        self._sender = sender
        self._redis = client
        self._expires_s = expires_s

    def send(self, parcel: Parcel) -> None:
        self._sender.send_task(RELEASE_AGENT, queue=RELEASE_QUEUE, kwargs=asdict(parcel),
                               task_id=f"release:{parcel.session}:{parcel.token}",
                               expires=self._expires_s)

    def hand_back(self, owner: str, token: str) -> None:
        """What a `release_agent` task run in another process does with the token."""
        key = tokens_key(owner)
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.rpush(key, token)
            pipe.expire(key, TOKENS_TTL_S)
            pipe.execute()

    def take(self, owner: str) -> list[str]:
        tokens = self._redis.lpop(tokens_key(owner), TAKE_AT_MOST)
        return [t.decode() if isinstance(t, bytes) else str(t) for t in tokens or []]

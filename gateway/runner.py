"""One turn, start to end: fence check, heartbeat, agent, reply, complete, next.

This is the gateway's one broad `except`: whatever an agent raises becomes an honest
failure reply for the user and a traceback for the operator, and the chat moves on.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import redis

from gateway.agents.cache import AgentCache
from gateway.chats import ChatStore, Dispatch
from gateway.dispatch import Publisher
from gateway.errors import GatewayError
from gateway.feishu.outbound import Outbound, reply_uuid
from gateway.locks import LockRegistry
from gateway.types import Message, Turn

logger = logging.getLogger(__name__)

FAILURE_REPLY = "Sorry, something went wrong while answering this message."


class Heartbeat:
    """Extends the turn's lease every `interval_s`; sets `lost` once the lease is gone."""

    def __init__(self, store: ChatStore, turn: Dispatch, interval_s: float,
                 lost: threading.Event) -> None:
        self._store = store
        self._turn = turn
        self._interval_s = interval_s
        self._lost = lost
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            try:
                if not self._store.heartbeat(self._turn):
                    logger.warning("turn %s of chat %s lost its lease", self._turn.message_id,
                                   self._turn.chat_id)
                    self._lost.set()
                    return
            except redis.RedisError as error:
                logger.warning("heartbeat for chat %s failed: %s", self._turn.chat_id, error)


@dataclass
class TurnRunner:
    store: ChatStore
    locks: LockRegistry
    agents: AgentCache
    outbound: Outbound
    publisher: Publisher
    heartbeat_s: float

    def run(self, turn: Dispatch, *, task_id: str, worker: str) -> str:
        """Run one turn; returns how it ended: stale, replied, silent, failed."""
        message = self.store.start(turn, task_id, worker)
        if message is None:
            logger.info("turn %s of chat %s skipped: fence %d is stale",
                        turn.message_id, turn.chat_id, turn.fence)
            return "stale"
        started = time.monotonic()
        with self.locks.hold(turn.chat_id, turn.fence) as lock, \
                Heartbeat(self.store, turn, self.heartbeat_s, lock.lost):
            reply, outcome = self._answer(Turn(message, turn.fence, lock.lost.is_set))
            if reply and self.store.holds(turn):
                self._reply(message, reply)
            elif reply:
                outcome = "fenced"
            following = self.store.complete(turn)
        logger.info("turn %s of chat %s %s in %.2fs", message.message_id, message.chat_id,
                    outcome, time.monotonic() - started)
        if following:
            self.publisher.publish(following)
        return outcome

    def _answer(self, turn: Turn) -> tuple[str | None, str]:
        try:
            reply = self.agents.get(turn.chat_id).run(turn)
        except Exception:  # the boundary: any agent error becomes a failure reply
            logger.exception("agent failed on message %s of chat %s", turn.message_id,
                             turn.chat_id)
            return FAILURE_REPLY, "failed"
        return reply, ("replied" if reply else "silent")

    def _reply(self, message: Message, text: str) -> None:
        try:
            self.outbound.reply_text(message.message_id, text,
                                     uuid=reply_uuid(message.message_id),
                                     in_thread=bool(message.thread_id))
        except GatewayError as error:
            logger.error("reply to %s in chat %s not delivered: %s", message.message_id,
                         message.chat_id, error)

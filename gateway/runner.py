"""One turn, start to end: fence check, heartbeat, agent, reply, complete, next.

This is the gateway's one broad `except`: whatever an agent raises becomes an honest
failure reply for the user and a traceback for the operator, and the chat moves on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from gateway.agents.cache import AgentCache
from gateway.chats import ChatStore, Dispatch
from gateway.chunking import chunk_text
from gateway.dispatch import Publisher
from gateway.errors import GatewayError
from gateway.feishu.outbound import Outbound, reply_uuid
from gateway.locks import LockRegistry
from gateway.types import Message, Turn

logger = logging.getLogger(__name__)

FAILURE_REPLY = "Sorry, something went wrong while answering this message."


def gave_up_reply(attempts: int) -> str:
    return (f"Sorry, this message could not be answered: {attempts} attempts to answer it "
            "were cut off. The chat goes on with your next message.")


def session_key(chat_id: str, generation: int) -> str:
    """Agents are cached per session; /new starts a new generation, hence a new session."""
    return f"{chat_id}#{generation}"


class Heartbeat:
    """Every `poll_s`: extend the turn's lease and watch for /stop; sets `stopped` when
    the turn was cancelled or lost its lease."""

    def __init__(self, store: ChatStore, turn: Dispatch, poll_s: float,
                 stopped: threading.Event) -> None:
        self._store = store
        self._turn = turn
        self._poll_s = poll_s
        self._stopped = stopped
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._poll_s):
            try:
                state = self._store.heartbeat(self._turn)
            except redis.RedisError as error:
                logger.warning("heartbeat for chat %s failed: %s", self._turn.chat_id, error)
                continue
            if state != "held":
                logger.info("turn %s of chat %s %s", self._turn.message_id, self._turn.chat_id,
                            "was cancelled" if state == "cancelled" else "lost its lease")
                self._stopped.set()
                return


@dataclass
class TurnRunner:
    store: ChatStore
    locks: LockRegistry
    agents: AgentCache
    outbound: Outbound
    publisher: Publisher
    poll_s: float
    reply_chunk_chars: int = 4000

    def run(self, turn: Dispatch, *, task_id: str, worker: str) -> str:
        """Run one turn; returns how it ended: stale, replied, silent, failed, stopped."""
        started = self.store.start(turn, task_id, worker)
        if started is None:
            logger.info("turn %s of chat %s skipped: fence %d is stale",
                        turn.message_id, turn.chat_id, turn.fence)
            return "stale"
        message, clock = started.message, time.monotonic()
        if started.exhausted:
            return self._give_up(turn, message, started.attempt)
        with self.locks.hold(turn.chat_id, turn.fence) as lock, \
                Heartbeat(self.store, turn, self.poll_s, lock.stopped):
            session = session_key(turn.chat_id, started.generation)
            reply, outcome = self._answer(lambda t: self.agents.get(session).run(t),
                                          Turn(message, turn.fence, lock.stopped.is_set))
            if lock.stopped.is_set() or (reply and not self.store.may_reply(turn)):
                outcome = "stopped"
            elif reply:
                self._reply(message, reply)
            self.publisher.hand_over(turn)
        logger.info("turn %s of chat %s %s in %.2fs", message.message_id, message.chat_id,
                    outcome, time.monotonic() - clock)
        return outcome

    def _give_up(self, turn: Dispatch, message: Message, attempts: int) -> str:
        """A message whose turns died every time (crash, kill, time limit): tell the
        user, drop it, and let the chat go on."""
        logger.error("message %s of chat %s dropped after %d attempts that never finished",
                     message.message_id, message.chat_id, attempts)
        self._reply(message, gave_up_reply(attempts))
        self.publisher.hand_over(turn)
        return "gave-up"

    @staticmethod
    def _answer(run: Callable[[Turn], str | None], turn: Turn) -> tuple[str | None, str]:
        try:
            reply = run(turn)
        except Exception:  # the boundary: any agent (or factory) error is a failure reply
            logger.exception("agent failed on message %s of chat %s", turn.message_id,
                             turn.chat_id)
            return FAILURE_REPLY, "failed"
        return (str(reply), "replied") if reply else (None, "silent")

    def _reply(self, message: Message, text: str) -> None:
        """Send the reply, split into chunks; each chunk's uuid is fixed by its position."""
        for index, chunk in enumerate(chunk_text(text, self.reply_chunk_chars)):
            purpose = "reply" if index == 0 else f"reply-{index}"
            try:
                self.outbound.reply_text(message.message_id, chunk,
                                         uuid=reply_uuid(message.message_id, purpose),
                                         in_thread=bool(message.thread_id))
            except GatewayError as error:
                logger.error("reply to %s in chat %s not delivered: %s", message.message_id,
                             message.chat_id, error)
                return

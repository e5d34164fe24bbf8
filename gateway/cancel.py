"""/stop, /new and `feishu-gateway stop`: end a chat's turn within the cancel timeout.

Why a chat can never stay blocked after a cancel: the chat's lease is the only thing
that blocks it, and this path ends with the lease either released by the turn itself
(it saw the flag and completed) or taken from it here (fence advanced, head dropped,
next turn dispatched). Nothing waits on the cancelled process: a turn that ignores the
flag keeps running on a stale fence, so it can neither reply, pop the inbox nor touch
the next holder's lease. The wait happens on the listener's control threads (or the
CLI), never on the SDK loop and never in a worker slot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gateway.chats import ChatStore, Dispatch
from gateway.dispatch import Publisher

logger = logging.getLogger(__name__)

How = Literal["nothing", "not-started", "cooperative", "timeout-fenced"]
Revoke = Callable[[str, bool], None]
"""revoke(task_id, terminate): Celery's revoke broadcast."""


@dataclass(frozen=True, slots=True)
class CancelResult:
    chat_id: str
    how: How
    task_id: str = ""
    took_s: float = 0.0
    pending: int = 0
    new_session: bool = False

    def describe(self) -> str:
        """The operator's line."""
        what = {
            "nothing": "nothing was running",
            "not-started": f"turn {self.task_id} revoked before it started",
            "cooperative": f"turn {self.task_id} cancelled cooperatively",
            "timeout-fenced": f"turn {self.task_id} fenced after the timeout",
        }[self.how]
        extra = "; new conversation" if self.new_session else ""
        return (f"chat {self.chat_id}: {what} in {self.took_s:.2f}s; "
                f"pending messages re-dispatched: {self.pending}{extra}")

    def user_reply(self) -> str:
        """The user's one short line."""
        first = "Nothing was running." if self.how == "nothing" else "Stopped."
        if self.new_session:
            first = ("New conversation started." if self.how == "nothing"
                     else "Stopped. New conversation started.")
        if self.pending:
            first += f" {self.pending} waiting message(s) will be answered next."
        return first


class Canceller:
    def __init__(self, store: ChatStore, publisher: Publisher, revoke: Revoke, *,
                 timeout_s: float, lease_ttl_ms: int, terminate: bool = False,
                 poll_s: float = 0.05) -> None:
        self._store = store
        self._publisher = publisher
        self._revoke = revoke
        self.timeout_s = timeout_s
        self.lease_ttl_ms = lease_ttl_ms
        self.terminate = terminate
        self.poll_s = poll_s

    def cancel(self, chat_id: str, *, new_session: bool = False) -> CancelResult:
        """Stop the chat's current turn (if any), then let the chat go on."""
        clock = time.monotonic()
        if new_session:
            self._store.new_session(chat_id)
        lease = self._store.lease(chat_id)
        if "fence" not in lease:
            result = CancelResult(chat_id, "nothing", new_session=new_session,
                                  pending=self._store.pending_count(chat_id))
            logger.info("cancel chat=%s how=nothing took_s=%.3f", chat_id, result.took_s)
            return result
        turn = Dispatch(chat_id, lease.get("message_id", ""), int(lease["fence"]))
        task_id = lease.get("task_id", "")
        waiting = max(self._store.pending_count(chat_id) - 1, 0)  # behind the cancelled head
        # the flag outlives the turn's lease, so a sweeper can still see it was stopped
        self._store.request_cancel(turn, int(self.timeout_s * 1000) + 2 * self.lease_ttl_ms)
        if task_id:
            self._revoke(task_id, False)
        how: How = "not-started"
        if lease.get("state") == "running":
            how = "cooperative" if self._wait_for_end(turn) else "timeout-fenced"
        if how != "cooperative":
            following = self._publisher.hand_over(turn)
            if following is False and how == "timeout-fenced":
                how = "cooperative"  # it completed by itself just as the timeout ran out
            if how == "timeout-fenced" and self.terminate and task_id:
                self._revoke(task_id, True)
        result = CancelResult(chat_id, how, task_id, time.monotonic() - clock, waiting,
                              new_session)
        logger.info("cancel chat=%s turn=%s how=%s took_s=%.3f pending=%d", chat_id,
                    task_id or "-", how, result.took_s, result.pending)
        return result

    def _wait_for_end(self, turn: Dispatch) -> bool:
        """True when the turn ended by itself (its fence moved on) within the timeout."""
        deadline = time.monotonic() + self.timeout_s
        while self._store.holds(turn):
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_s)
        return True

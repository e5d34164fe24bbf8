"""/stop, /new and `feishu-gateway stop`: end a chat's turn within the cancel timeout.

Why a chat can never stay blocked after a cancel: the chat's lease is the only thing that
blocks it, and this path ends with the lease released by the turn itself (it saw the flag
and completed) or taken from it here (fence advanced, message dropped, next turn
dispatched). The state change is one script (`lua/cancel.lua`) recorded under the command's
id, so it survives the canceller's death: a turn not started yet is dropped in that same
step; a running one sees the flag, stops extending its lease and ends, and if nobody is left
to fence it after the timeout, its lease runs out and the sweeper drops its message (the
flag outlives the lease). Nothing waits on the cancelled process: a turn that ignores the
flag runs on with a stale fence that lets it do nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.core import metrics

logger = logging.getLogger(__name__)

How = Literal["nothing", "not-started", "cooperative", "timeout-fenced", "debounced"]
Revoke = Callable[[str, bool], None]
"""revoke(task_id, terminate): Celery's revoke broadcast."""
Settle = Callable[[str, str, int], None]
"""settle(chat_id, outcome, fence): after a stop ended the turn of `fence` in the chat
(gateway/orphan_cards.py: the cards its gone turns left streaming are closed)."""


def _settled(chat_id: str, outcome: str, fence: int) -> None:
    """Nothing to settle."""
RECORD_TTL_MS = 300_000
"""A stop is remembered this long, so another listener can finish a command whose listener
died (it takes orphaned control jobs up after 10 s), and never do it twice."""


@dataclass(frozen=True, slots=True)
class CancelResult:
    chat_id: str
    how: How
    task_id: str = ""
    took_s: float = 0.0
    pending: int = 0
    new_session: bool = False
    again_in_s: float = 0.0
    """Debounced while another turn runs (not the one the earlier stop ended): a stop
    after this many seconds stops it."""

    def describe(self) -> str:
        """The operator's line."""
        what = {
            "nothing": "nothing was running",
            "debounced": "already stopped a moment ago; nothing more done",
            "not-started": f"turn {self.task_id} revoked before it started",
            "cooperative": f"turn {self.task_id} cancelled cooperatively",
            "timeout-fenced": f"turn {self.task_id} fenced after the timeout",
        }[self.how]
        extra = "; new conversation" if self.new_session else ""
        return (f"chat {self.chat_id}: {what} in {self.took_s:.2f}s; "
                f"pending messages re-dispatched: {self.pending}{extra}")

    def user_reply(self, *, shown: bool = False) -> str:
        """The user's one short line; '' when there is nothing to add to what the stopped
        turn's answer shows (`shown`: its card or edited message carries the stop's mark),
        so the command is confirmed with a reaction, not said twice."""
        stopped = "" if shown and self.how in ("cooperative", "timeout-fenced") else "Stopped."
        first = {"nothing": "Nothing was running.", "debounced": "Already stopped."}.get(
            self.how, stopped)
        if self.how == "debounced" and self.again_in_s > 0:
            first = (f"The previous turn was just stopped; send /stop again in "
                     f"{math.ceil(self.again_in_s)} s to stop the one now running.")
        if self.new_session:
            first = " ".join(filter(None, ("" if self.how in ("nothing", "debounced")
                                           else stopped, "New conversation started.")))
        if self.pending:
            first += f" {self.pending} waiting message(s) will be answered next."
        return first.strip()


@dataclass(frozen=True, slots=True)
class Stopping:
    """A running turn that was asked to stop: ended by `Canceller.end`."""

    turn: TurnRef
    task_id: str
    pending: int
    new_session: bool
    began: float
    deadline: float
    """time.monotonic() after which it is fenced off."""
    outcome: str = "stopped"
    """What the chat's history records for it (withdrawn, removed: see `watch`)."""


class Canceller:
    def __init__(self, store: ChatStore, publish: Callable[[TurnRef], object],
                 revoke: Revoke, *, timeout_s: float, lease_ttl_ms: int,
                 debounce_s: float, terminate: bool = False, poll_s: float = 0.02,
                 settle: Settle = _settled) -> None:
        self._store = store
        self._settle = settle
        self._publish = publish
        self._revoke = revoke
        self.timeout_s = timeout_s
        self.lease_ttl_ms = lease_ttl_ms
        self.debounce_s = debounce_s
        self.terminate = terminate
        self.poll_s = poll_s

    def cancel(self, chat_id: str, command_id: str, *, new_session: bool = False,
               target: str = "*", debounce: bool = True) -> CancelResult:
        """Stop the chat's turn `target` (the fence that held the chat when the command was
        sent; "*" whatever holds it now), then let the chat go on; blocks up to the timeout.
        Running it again with the same `command_id` (after a crash) finishes the same stop,
        never a second one."""
        begun = self.begin(chat_id, command_id, new_session=new_session, target=target,
                           debounce=debounce)
        if isinstance(begun, CancelResult):
            return begun
        while self._store.turns.holds(begun.turn) and time.monotonic() < begun.deadline:
            time.sleep(self.poll_s)
        return self.end(begun, ended=not self._store.turns.holds(begun.turn))

    def begin(self, chat_id: str, command_id: str, *, new_session: bool = False,
              target: str = "*", debounce: bool = True, renewed: bool = False,
              only_queued: bool = False, sent_ms: int = 0,
              interrupt: str = "") -> CancelResult | Stopping:
        """The stop's first part, which never waits: the result, or the running turn that
        was flagged, to be ended with `end` once it stopped or its deadline passed (the
        control desk watches many of them at once). `renewed`: the /new's session was
        already renewed when it was admitted. `only_queued`: a running turn is left alone
        ("nothing"), decided in the same step as the rest. `sent_ms`: the command's
        create_time (merging, a turn not started yet drops the messages sent up to it; 0:
        every waiting one). `interrupt`: busy mode interrupt, the id of the new message
        that stops the running turn, whose messages go into the next turn (a turn not
        running, or a new message withdrawn meanwhile, is left alone: "nothing")."""
        clock = time.monotonic()
        # the flag outlives the turn's lease, so a sweeper can still see it was stopped
        flag_ttl_ms = max(int(self.timeout_s * 1000) + 2 * self.lease_ttl_ms, RECORD_TTL_MS)
        debounce_ms = int(self.debounce_s * 1000) if debounce else 0
        step = self._store.cancels.cancel(chat_id, command_id, debounce_ms=debounce_ms,
                                  flag_ttl_ms=flag_ttl_ms, target_fence=target,
                                  new_session=new_session and not renewed,
                                  only_queued=only_queued, sent_ms=sent_ms,
                                  interrupt=interrupt)
        recorded = step.recorded_how if step.how == "again" else step.how
        how: How
        if recorded == "debounced" and step.fence is not None:
            result = self._result(chat_id, "debounced", step.task_id, clock, step.waiting,
                                  new_session)
            return dataclasses.replace(result, again_in_s=self.debounce_s)
        if recorded in ("nothing", "debounced"):
            how = recorded  # type: ignore[assignment]
        elif recorded == "not-started":
            how = "not-started"
            if step.following is not None:  # first: the chat goes on whatever the broker says
                self._publish(step.following)
            if step.task_id:
                self._revoke(step.task_id, False)  # copies in the broker are skipped at once
            if step.fence is not None:  # (a dropped re-run: its card, if any, is left)
                self._settle(chat_id, "stopped", step.fence)
        else:
            assert step.fence is not None
            return Stopping(TurnRef(chat_id, "", step.fence), step.task_id, step.waiting,
                           new_session, clock, clock + self.timeout_s)
        return self._result(chat_id, how, step.task_id, clock, step.waiting, new_session)

    def watch(self, chat_id: str, fence: int, task_id: str, outcome: str) -> Stopping:
        """A running turn whose flag a step already raised (its message withdrawn, the bot
        removed from its chat: gateway/chats/change_steps.py), to be ended with `end` like a
        stop's; `outcome` goes into the chat's history."""
        clock = time.monotonic()
        return Stopping(TurnRef(chat_id, "", fence), task_id, 0, False, clock,
                       clock + self.timeout_s, outcome)

    def _fence_off(self, turn: TurnRef, outcome: str) -> str:
        """End the turn that did not stop in time (its message dropped, `outcome` in the
        chat's history) and publish the next one; what `complete` did."""
        completion = self._store.turns.complete(turn, outcome=outcome)
        if completion.following is not None:
            self._publish(completion.following)
        return completion.outcome

    def end(self, waiting: Stopping, *, ended: bool) -> CancelResult:
        """The running turn's stop, finished: it ended by itself (`ended`), or the timeout
        passed and it is fenced off here (its message dropped, the next one dispatched)."""
        how: How = "cooperative"
        if not ended and self._fence_off(waiting.turn, waiting.outcome) != "stale":
            how = "timeout-fenced"  # (stale: it completed by itself just as time ran out)
            if self.terminate and waiting.task_id:
                self._revoke(waiting.task_id, True)
        # (ended by itself, or its lease ran out: the card is left when its worker is gone)
        self._settle(waiting.turn.chat_id, waiting.outcome, waiting.turn.fence)
        return self._result(waiting.turn.chat_id, how, waiting.task_id, waiting.began,
                            waiting.pending, waiting.new_session)

    def revoked(self, chat_id: str, fence: int, task_id: str, *, terminated: bool) -> str:
        """Celery revoked task `task_id` (sent for the turn of `fence`) on its own (`celery
        control revoke`, Flower); the operator's line of what the chat made of it.

        The task may run a later turn of its chat than the one it was sent for (it drains
        the chat), so the turn is the lease's when either its fence or its task id match.
        A queued turn is dropped and the chat goes on; a terminated one is stopped at once
        (its process is gone) and recorded as stopped. A plain revoke never stops a running
        task in Celery: what was discarded is a copy of it (a redelivery, a requeue), and
        the turn goes on; that is decided in the same script that would stop it, so a copy
        discarded just as the turn starts cannot stop it either. No revoke is broadcast
        again: Celery did that."""
        lease = self._store.lease(chat_id)
        held = lease.get("fence", "")
        if not held or (held != str(fence) and lease.get("task_id") != task_id):
            return "its chat has moved on; nothing to do"
        quiet = copy.copy(self)  # this one, but broadcasting no revoke of its own
        quiet._revoke, quiet.terminate = _no_revoke, False
        kind = "terminated" if terminated else "revoked"
        began = quiet.begin(chat_id, f"{kind}:{task_id}:{held}", target=held, debounce=False,
                            only_queued=not terminated)
        if isinstance(began, Stopping):
            began = quiet.end(began, ended=False)
        if began.how == "nothing" and not terminated:
            return ("a copy of a turn that runs (or ran) was discarded; the turn goes on "
                    "(`feishu-gateway revoke --terminate` stops it)")
        return began.describe()

    @staticmethod
    def _result(chat_id: str, how: How, task_id: str, began: float, pending: int,
                new_session: bool) -> CancelResult:
        result = CancelResult(chat_id, how, task_id, time.monotonic() - began, pending,
                              new_session)
        metrics.cancelled(how)
        logger.info("cancel chat=%s turn=%s how=%s took_s=%.3f pending=%d", chat_id,
                    task_id or "-", how, result.took_s, result.pending)
        return result


def _no_revoke(task_id: str, terminate: bool) -> None:
    """Celery revoked the task already."""

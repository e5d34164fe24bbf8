"""What the acting commands do: revoke a turn, retry a message, purge a chat.

Each goes through the chat's own state machine (gateway/state): a revoke is the /stop path
for one turn, a retry enters the chat's inbox, a purge never takes the held turn's message."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from gateway.chats import admin
from gateway.chats.cancel import CancelResult
from gateway.chats.history import read_history
from gateway.chats.keys import turn_task_id
from gateway.core.errors import Refused
from gateway.ops.cli.context import Ops

PURGE_BATCH = 200
"""Entries dropped per script call (a progress step; Redis stays responsive meanwhile)."""


@dataclass(frozen=True, slots=True)
class TurnId:
    chat_id: str
    message_id: str
    fence: int

    @classmethod
    def parse(cls, task_id: str) -> TurnId:
        """`turn:<chat_id>:<message_id>:<fence>` (gateway/broker/names.py), or Refused."""
        head, _, rest = task_id.partition(":")
        chat_id, _, tail = rest.partition(":")
        message_id, _, fence = tail.rpartition(":")
        digits = fence.isascii() and fence.isdigit()
        if head != "turn" or not chat_id or not message_id or not digits:
            raise Refused(f"{task_id!r} is not a turn's task id (they read "
                          "turn:<chat_id>:<message_id>:<fence>; `feishu-gateway chat <chat_id>` "
                          "shows them)")
        return cls(chat_id, message_id, int(fence))

    @property
    def task_id(self) -> str:
        return turn_task_id(self.chat_id, self.message_id, self.fence)


def stop(ops: Ops, chat_id: str, *, new: bool) -> CancelResult:
    """Exactly what /stop (or /new) does, from the terminal, with no debounce: it neither
    waits out the chat's users' debounce nor starts one (their /stop right after is not
    'Already stopped.'; gateway/chats/lua/cancel.lua)."""
    ops.require_chat(chat_id)
    return ops.runtime.canceller.cancel(chat_id, f"cli:{uuid.uuid4().hex}", new_session=new,
                                        debounce=False)


def revoke(ops: Ops, task_id: str, *, terminate: bool) -> CancelResult:
    """A queued turn never runs (its message is dropped, the chat's next one goes); a
    running one is stopped as /stop stops it, and with `terminate` its process is killed
    if it has not stopped within GATEWAY_CANCEL_TIMEOUT. `task_id` is the Celery task's id
    or the turn's own (they differ for the turns a task ran after its first); the result
    names the turn revoked by its own id."""
    turn = TurnId.parse(task_id)
    ops.require_chat(turn.chat_id)
    lease = ops.store.lease(turn.chat_id)
    if lease.get("fence") != str(turn.fence) and lease.get("task_id") != task_id:
        history = read_history(ops.redis, ops.store.keys(turn.chat_id))
        record = next((r for r in history if r.fence == str(turn.fence)
                       or r.task_id == task_id), None)
        if record is not None:
            raise Refused(f"turn {task_id} is over ({record.outcome}); nothing to revoke"
                          + (" (`feishu-gateway retry` runs it again)"
                             if record.entry else ""))
        raise Refused(f"turn {task_id} is neither waiting nor running (it ended, or never "
                      "was); nothing to revoke")
    fence = lease.get("fence", str(turn.fence))
    canceller = ops.runtime.canceller
    canceller.terminate = terminate or canceller.terminate
    result = canceller.cancel(turn.chat_id, f"cli:{uuid.uuid4().hex}", target=fence,
                              debounce=False)
    revoked = turn_task_id(turn.chat_id, lease.get("message_id") or turn.message_id,
                           int(fence))
    return dataclasses.replace(result, task_id=revoked)  # the line names the turn, not its task


def resolve(ops: Ops, task_id: str) -> tuple[str, str]:
    """(chat_id, message_id) of a finished turn named by its turn id or its task's id: a
    task that drained its chat ran several turns, and only its first one's message is in
    its id."""
    turn = TurnId.parse(task_id)
    ops.require_chat(turn.chat_id)
    history = read_history(ops.redis, ops.store.keys(turn.chat_id))
    if any(r.message_id == turn.message_id and r.fence == str(turn.fence) for r in history):
        return turn.chat_id, turn.message_id
    ran = {r.message_id for r in history if r.task_id == task_id and r.entry}
    if len(ran) > 1:
        raise Refused(f"task {task_id} ran several turns that can be retried; name one by "
                      f"its turn id (`feishu-gateway chat {turn.chat_id}` lists them)")
    return turn.chat_id, ran.pop() if ran else turn.message_id


def retry(ops: Ops, chat_id: str, message_id: str, *, anyway: bool) -> str:
    """Put a failed, stopped or given-up turn's message back in its chat's inbox."""
    ops.require_chat(chat_id)
    if not anyway:
        ops.require_workers()
    result = admin.retry(ops.store, chat_id, message_id)
    retention = f"GATEWAY_RETRY_RETENTION_S={ops.settings.retry_retention_s}"
    what = f"message {message_id} of chat {chat_id}"
    if result.how == "unknown":
        raise Refused(f"{what} has no finished turn on record: unknown, or it ended longer "
                      f"ago than the retention ({retention}) or before the last "
                      f"GATEWAY_HISTORY_TURNS={ops.settings.history_turns} turns")
    if result.how == "answered":
        raise Refused(f"{what} was answered ({result.outcome}); only a failed, stopped or "
                      "given-up turn is retried")
    if result.how == "unreadable":
        raise Refused(f"{what}: its stored entry cannot be read, so it cannot run again")
    if result.how == "waiting":
        raise Refused(f"{what} already waits or runs in its chat; nothing more done")
    if result.how == "full":
        raise Refused(f"chat {chat_id} has {result.waiting} messages waiting (GATEWAY_INBOX_CAP)"
                      "; try again when fewer wait")
    if result.following is not None:
        ops.runtime.publisher.publish(result.following)
    return (f"{what} will run again, answered once, after the {result.waiting} message(s) "
            "waiting before it")


def purge(ops: Ops, chat_id: str, entries: list[str],
          advance: Callable[[int], object] = lambda n: None) -> int:
    """Drop `entries` (what the operator was shown) from the chat's inbox in batches,
    calling `advance(n)` after each; the held turn's message stays. Returns how many went."""
    dropped = 0
    for start in range(0, len(entries), PURGE_BATCH):
        batch = entries[start: start + PURGE_BATCH]
        gone, _ = admin.purge(ops.store, chat_id, batch)
        dropped += gone
        advance(len(batch))
    return dropped


def purge_with_progress(ops: Ops, chat_id: str, entries: list[str]) -> int:
    """`purge`, with a progress bar on a terminal when it takes several batches."""
    if not sys.stderr.isatty() or len(entries) <= PURGE_BATCH:
        return purge(ops, chat_id, entries)
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"purging chat {chat_id}", total=len(entries))
        return purge(ops, chat_id, entries, lambda n: progress.advance(task, n))


def notify_purged(ops: Ops, chat_id: str, entries: list[str], dropped: int) -> str:
    """Tell the chat, in one reply to the newest dropped message, that it was cleared."""
    from gateway.chats.store_types import entry_message

    newest = next((m for m in map(entry_message, reversed(entries)) if m is not None), None)
    if newest is None:
        return "nobody told: no dropped message could be read"
    ops.runtime.replies.send_text(
        newest.message_id, f"An operator cleared {dropped} waiting message(s) of this chat; "
        "they will not be answered.", uuid=str(uuid.uuid4()),  # one notice a purge
        app_id=newest.app_id, chat_id=newest.chat_id)
    return f"chat {chat_id} told in a reply to {newest.message_id}"

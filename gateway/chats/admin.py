"""An operator's changes to a chat: drop its waiting messages, re-run a turn that ended badly.

Both keep the chat's order: a purge never touches the message the chat's turn holds, and a
retried message enters the inbox at the back and runs in its turn (lua/purge.lua,
lua/retry.lua).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.chats.history import find_turn, read_history
from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef, claimed_turn, text_of

RetryHow = Literal["unknown", "answered", "waiting", "full", "unreadable", "queued",
                   "claimed"]


@dataclass(frozen=True, slots=True)
class RetryResult:
    how: RetryHow
    waiting: int = 0
    """Messages that wait before the retried one."""
    outcome: str = ""
    """How the turn ended (for "answered")."""
    following: TurnRef | None = None
    """The chat was idle: this turn is claimed, to be published."""

    @property
    def accepted(self) -> bool:
        return self.how in ("queued", "claimed")


def known(store: ChatStore, chat_id: str) -> bool:
    """Whether Redis remembers the chat: a turn, a waiting message, a fence from the last
    day, a session or a history (an unknown id is most likely a typo)."""
    k = store.keys(chat_id)
    return bool(store.redis.exists(k.lease, k.inbox, k.fence, k.tries, k.generation, k.done))


def purge(store: ChatStore, chat_id: str, entries: Sequence[str]) -> tuple[int, bool]:
    """Drop `entries` (as `ChatStore.pending_entries` gave them) from the chat's inbox,
    except the one its turn holds. Returns (dropped, whether the held one was kept)."""
    dropped, kept = store.run_script("purge", chat_id, [chat_id, *entries])
    return int(dropped), bool(int(kept))


def retry(store: ChatStore, chat_id: str, message_id: str) -> RetryResult:
    """Put the message of a failed, stopped or given-up turn back in the chat's inbox,
    behind what waits; its answer gets uuids of its own (`Message.reply_key`)."""
    for _ in range(3):  # a newer record of it may come between the read and the script
        result = _retry_once(store, chat_id, message_id)
        if result is not None:
            return result
    return RetryResult("waiting")


def _retry_once(store: ChatStore, chat_id: str, message_id: str) -> RetryResult | None:
    record = find_turn(read_history(store.redis, store.keys(chat_id)), message_id)
    if record is None:
        return RetryResult("unknown")
    if not record.entry:
        return RetryResult("answered", outcome=record.outcome)
    message = record.message
    if message is None:
        return RetryResult("unreadable", outcome=record.outcome)
    again = dataclasses.replace(message, retry=message.retry + 1)
    reply = [text_of(v) for v in store.run_script(
        "retry", chat_id, [message_id, chat_id, record.fence, again.to_json(),
                           store.options("retry")],
        more_keys=[store.keys(chat_id).done])]
    how = reply[0]
    if how == "changed":
        return None
    if how == "answered":
        return RetryResult("answered", outcome=reply[1])
    if how in ("unknown", "waiting"):
        return RetryResult(how)  # type: ignore[arg-type]
    waiting = int(reply[1])
    if how == "claimed":
        return RetryResult("claimed", waiting, following=claimed_turn(chat_id, reply[2],
                                                                      reply[3]))
    return RetryResult(how, waiting)  # type: ignore[arg-type]

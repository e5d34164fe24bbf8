"""The chat state's values: the limits its scripts enforce, a reference to a turn, what each
step reports, and the inbox entries the scripts store (`<arrival>|<message_id>|<json>`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.core.errors import RetryableError
from gateway.core.model import Message


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The lease TTLs and caps the scripts enforce (see Settings for what each means)."""

    claim_ttl_ms: int = 15_000
    queued_ttl_ms: int = 900_000
    running_ttl_ms: int = 30_000
    requeue_cap_ms: int = 240_000
    dedupe_ttl_s: int = 172_800
    inbox_cap: int = 100
    max_attempts: int = 3
    session_ttl_ms: int = 30 * 86_400_000
    control_cap: int = 100_000
    durable_ack: Literal["none", "aof", "replica"] = "none"
    """Wait for the admission to be on disk (WAITAOF) or on a replica (WAIT) before ACK."""
    durable_ack_timeout_ms: int = 1000
    history_cap: int = 10
    """A chat's finished turns kept for `feishu-gateway chat` and `retry` (0: none)."""
    history_ttl_ms: int = 86_400_000
    """How long a chat's history is kept after its last turn ended (the retry retention)."""
    late_after_ms: int = 0
    """A message whose create_time is older than this on Redis's clock is late (0: never)."""
    late_events: Literal["note", "drop"] = "note"
    """A late message's chat is told so (`note`), or it is only logged (`drop`)."""
    ran_ttl_ms: int = 3_720_000
    """How long a chat's marks of which process started each session's last turn live after
    its last mark: as long as an idle agent can stay cached (GATEWAY_AGENT_IDLE_TTL_S and a
    sweep)."""
    ran_cap: int = 1000
    """The sessions of one chat whose marks are kept (past it, the oldest go)."""
    flag_ttl_ms: int = 300_000
    """How long the stop flag of a turn whose message was withdrawn (or whose chat the bot
    left) lives: past its cancel timeout and its lease, as a /stop's does."""
    stop_hold_ms: int = 35_000
    """A running turn asked to stop keeps its lease at least this long (the cancel timeout
    and a lease TTL), so its canceller ends it at the timeout, never the lease running out
    first; a canceller that died leaves it to the sweeper after that."""
    merge_window_ms: int = 1500
    """Busy modes merge and interrupt: a turn starts once the chat's newest waiting message
    is this old."""
    active_cap: int = 0
    """The chats kept per shard in the index of recently active chats that catch-up reads
    (FEISHU_CATCHUP_MAX_CHATS; 0: no index)."""


@dataclass(frozen=True, slots=True)
class TurnRef:
    """A turn to publish: the chat's head message under its fence."""

    chat_id: str
    message_id: str
    fence: int
    preview: str = field(default="", compare=False)
    """The start of the message's text, for Flower's view of the task (when known)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """What `ingest` did with a message. `outcome` is also the events metric's label:
    `claimed` when its chat was idle and its turn was claimed (to be published), the word
    the scripts use."""

    outcome: Literal["claimed", "queued", "duplicate", "full", "command", "late", "withdrawn",
                     "left"]
    waiting: int = 0
    claimed: TurnRef | None = None
    """The turn claimed for the chat, to be published."""
    late_ms: int = 0
    """How late a late message was, on Redis's clock."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a turn says, kept before it is sent: `reply`, `stream` (its first chunk closes
    the streaming card), `failure` or `gave-up`."""

    kind: str
    chunks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Started:
    """A turn that may run. `message` is None when its stored entry cannot be read;
    `exhausted` when earlier attempts used up GATEWAY_MAX_ATTEMPTS; `answer` when an earlier
    attempt already produced one (resend it, do not ask the agent again)."""

    message_id: str
    message: Message | None
    generation: int
    attempt: int
    exhausted: bool = False
    answer: Answer | None = None
    merged: tuple[Message, ...] = ()
    """Busy modes merge and interrupt: every message the turn answers, oldest first
    (`message` the first), when it took more than one; the reply goes to the last.
    Unreadable ones are left out."""
    merged_ids: tuple[str, ...] = ()
    """The message ids of the merged messages, readable or not."""


@dataclass(frozen=True, slots=True)
class MergeWait:
    """A turn asked to come back in `ms` (busy modes merge and interrupt: its chat's newest
    message is younger than the merge window); nothing was changed."""

    ms: int


@dataclass(frozen=True, slots=True)
class Completion:
    """What `complete` did after a turn: `stale` (its fence was no longer the chat's:
    nothing touched), `idle` (nothing waits), `claimed` (the chat's next turn, `following`,
    is to be published) or `started` (it was started for the caller to run now)."""

    outcome: Literal["stale", "idle", "claimed", "started"]
    following: TurnRef | None = None
    started: Started | None = None
    """With `started`: how the following turn starts."""


class NotDurable(RetryableError):
    """The admission was not confirmed durable in time: do not ACK it (Feishu redelivers).
    `admission` is what the step did meanwhile (a turn to publish, maybe)."""

    def __init__(self, detail: str, admission: Admission) -> None:
        super().__init__(detail)
        self.admission = admission


def text_of(value: Any) -> str:
    """A Redis reply as str (bytes decoded)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def entry_parts(entry: str) -> tuple[str, str]:
    """An inbox entry `<arrival>|<message_id>|<json>` → (message_id, json)."""
    _, message_id, raw = entry.split("|", 2)
    return message_id, raw


def entry_message(entry: str) -> Message | None:
    try:
        return Message.from_json(entry_parts(entry)[1])
    except (ValueError, TypeError, KeyError):
        return None


PREVIEW_CHARS = 40


def claimed_turn(chat_id: str, fence: Any, entry: Any) -> TurnRef:
    """The turn a script claimed (its reply's fence and entry), to be published."""
    message_id, raw = entry_parts(text_of(entry))
    try:
        text = json.loads(raw).get("text")
    except (ValueError, AttributeError):
        text = None
    preview = text[:PREVIEW_CHARS] if isinstance(text, str) else ""
    return TurnRef(chat_id, message_id, int(fence), preview)

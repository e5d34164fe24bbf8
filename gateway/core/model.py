"""Values shared across the gateway: the normalised message, the agent's turn and what its
factory is handed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Protocol

import redis

from gateway.core.media import File, Image
from gateway.core.settings import Settings

GREETING = "greeting"
"""The `message_type` of a greeting the bot sends on its own (the bot added to a group, a
direct chat opened): its turn sends `text` to the chat, no agent runs."""
OUTBOUND = "outbound"
"""The `message_type` of a message the bot starts (`feishu-gateway send`, the
`gateway.post_message` task): its turn sends `text` (markdown) to the chat, or into its
thread; no agent runs."""
OUTBOUND_CARD = "outbound-card"
"""The same with a card: `text` is the card's JSON."""


ATTACHMENT_KINDS = ("image", "file", "audio", "video")


@dataclass(frozen=True, slots=True)
class Attachment:
    """One image, file, audio clip or video of a message (a rich-text post's images and
    videos too), as Feishu describes it; `Turn.fetch` downloads it."""

    kind: str
    """One of ATTACHMENT_KINDS."""
    key: str
    """Feishu's image_key (an image) or file_key (the others)."""
    name: str = ""
    """The file name, where Feishu gives one (files, videos)."""
    size: int = 0
    """Bytes, where Feishu says (0: unknown)."""
    duration_ms: int = 0
    """Audio and video: how long (0: unknown)."""
    message_id: str = ""
    """The message it came with (`Turn.attachments` fills it in)."""

    @property
    def resource_type(self) -> str:
        """The `type` Feishu's resource download takes for it: image or file."""
        return "image" if self.kind == "image" else "file"

    def to_dict(self) -> dict[str, object]:
        data = {"kind": self.kind, "key": self.key, "name": self.name, "size": self.size,
                "duration_ms": self.duration_ms}
        return {k: v for k, v in data.items() if v or k in ("kind", "key")}

    @classmethod
    def from_dict(cls, data: object) -> Attachment | None:
        """Tolerant: None for what is not an attachment (a newer writer's, a damaged one)."""
        if not isinstance(data, dict):
            return None
        kind, key = data.get("kind"), data.get("key")
        if not isinstance(kind, str) or not isinstance(key, str) or not key:
            return None
        name, size, duration = data.get("name", ""), data.get("size", 0), \
            data.get("duration_ms", 0)
        return cls(kind, key, name if isinstance(name, str) else "",
                   size if isinstance(size, int) and not isinstance(size, bool) else 0,
                   duration if isinstance(duration, int) and not isinstance(duration, bool)
                   else 0)


@dataclass(frozen=True, slots=True)
class ChatLine:
    """One earlier message of a chat, as `Turn.recent` and `Message.quote_chain` give it:
    who said what, when, with what attachments."""

    message_id: str
    sender_id: str
    """The user's open_id, or the app id of a bot (this one's answers included)."""
    from_app: bool
    """Sent by a bot (an app), not a person."""
    text: str
    """Its readable text (a card, an image or a file named as the agent's own text)."""
    create_time_ms: int
    attachments: tuple[Attachment, ...] = ()
    """Its images, files, audio clips and videos, each naming this message (what
    `Turn.fetch` takes)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One Feishu message, normalised and JSON-serialisable (what the inbox stores)."""

    message_id: str
    chat_id: str
    chat_type: str
    sender_open_id: str
    message_type: str
    text: str
    create_time_ms: int = 0
    thread_id: str = ""
    root_id: str = ""
    mentioned_open_ids: tuple[str, ...] = ()
    app_id: str = ""
    """The app the message came to, when the listener serves several and it is not the
    first (FEISHU_APPS); replies go out as that app."""
    parent_id: str = ""
    """The message this one replied to (quoted for the agent in `quote`)."""
    quote: str = ""
    """The text of the parent message, filled in by the worker before the agent reads it."""
    quote_chain: tuple[ChatLine, ...] = ()
    """The message this one replied to, then the one that replied to, and so on up to
    QUOTE_DEPTH (gateway/worker/enricher.py), nearest first: each with its sender,
    time and attachments. Filled in by the worker like `quote`; never stored."""
    retry: int = 0
    """How many times an operator re-ran this message (`feishu-gateway retry`)."""
    caught_up: bool = False
    """Sent while no listener was connected, so Feishu never pushed it: read back from the
    messages list API after the outage (docs/design.md#catch-up), and answered late."""
    attachments: tuple[Attachment, ...] = ()
    """Its images, files, audio clips and videos, in the order they appear (a post's inline
    images included); its text names each by a placeholder (`[image]`)."""

    @property
    def reply_key(self) -> str:
        """What the uuids and the streaming card of its answer derive from: a retry's
        answer is a new one, not a copy Feishu would drop as already sent, and so is each
        bot's answer to a message several of them got (a message tagged with its app)."""
        key = self.message_id if not self.retry else f"{self.message_id}#retry{self.retry}"
        return f"{key}@{self.app_id}" if self.app_id else key

    def to_json(self) -> str:
        data = asdict(self)
        del data["quote_chain"]  # (the worker reads it anew)
        for optional in ("app_id", "parent_id", "quote", "retry", "caught_up", "attachments"):
            if not data[optional]:
                del data[optional]
        if self.attachments:
            data["attachments"] = [a.to_dict() for a in self.attachments]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Message:
        """Read a stored message tolerantly: unknown fields (a newer writer) are ignored,
        missing optional ones take their defaults; ValueError when it is not a message."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("a stored message must be a JSON object")
        known = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        known["mentioned_open_ids"] = tuple(known.get("mentioned_open_ids") or ())
        known.pop("quote_chain", None)
        if not all(isinstance(known.get(key), str) and known[key]
                   for key in ("message_id", "chat_id")):
            raise ValueError("a stored message needs message_id and chat_id")
        for name in ("chat_type", "sender_open_id", "message_type", "text"):
            known.setdefault(name, "")
        if not isinstance(known.get("retry", 0), int) or isinstance(known.get("retry"), bool):
            known["retry"] = 0
        known["caught_up"] = known.get("caught_up") is True
        listed = known.get("attachments")
        known["attachments"] = tuple(a for a in map(Attachment.from_dict, listed)
                                     if a is not None) if isinstance(listed, list) else ()
        return cls(**known)


def _never() -> bool:
    return False


Approver = Callable[[str, float, "str | None"], str]
"""(prompt, timeout_s, key) → "once" | "session" | "always" | "deny" | "expired"."""


def _no_approver(prompt: str, timeout_s: float, key: str | None) -> str:
    return "deny"


Fetcher = Callable[[str, str, str], bytes]
"""(message_id, file_key, resource type: image | file) → the attachment's bytes."""


def _no_fetcher(message_id: str, file_key: str, kind: str) -> bytes:
    raise LookupError("this turn cannot fetch attachments")


Sender = Callable[["Image | File"], str]




FIELD_KINDS = ("text", "select", "multi_select", "date", "checkbox")
"""What a form field may be: a line of text, one of its options, several of them, a date
(`YYYY-MM-DD`), a box to tick."""


@dataclass(frozen=True, slots=True)
class FormField:
    """One field of a form `Turn.ask` shows (docs/agents.md#forms)."""

    name: str
    """The key its value has in `FormAnswer.values`."""
    label: str
    kind: str = "text"
    """One of FIELD_KINDS."""
    required: bool = False
    options: tuple[str, ...] = ()
    """A select's or multi_select's choices (each its own value)."""
    placeholder: str = ""
    max_chars: int = 1000
    """A text field's longest value."""


FormValue = str | bool | list[str]


@dataclass(frozen=True, slots=True)
class FormAnswer:
    """What a form `Turn.ask` showed came to."""

    state: str
    """`submitted`, `expired` (nobody submitted it in time) or `stopped` (the turn was)."""
    values: dict[str, FormValue] = field(default_factory=dict)
    """The submitted values by field name: a text, an option or a date (`YYYY-MM-DD`) as a
    str, a multi_select's options as a list, a checkbox as a bool; a field left empty is
    absent."""
    by: str = ""
    """Who submitted it (an open_id)."""

    @property
    def submitted(self) -> bool:
        return self.state == "submitted"


FormAsker = Callable[[str, "Sequence[FormField]", float], FormAnswer]
"""(title, fields, timeout_s) → what the form came to."""


def _no_form(title: str, fields: Sequence[FormField], timeout_s: float) -> FormAnswer:
    return FormAnswer("stopped")


Recent = Callable[[int], tuple[ChatLine, ...]]
"""(n) → the chat's last n messages before the turn's, oldest first."""


def _no_recent(count: int) -> tuple[ChatLine, ...]:
    return ()
"""(an image or file) → the id of the message that shows it (`Turn.send`)."""


def _no_sender(part: Image | File) -> str:
    raise LookupError("this turn cannot send images or files")


Progress = Callable[[str], None]
"""(step) → None: shows what the agent does now (`Turn.progress`)."""


def no_progress(step: str) -> None:
    """A turn's `reporter` where nothing shows progress."""
    return None


def merged_text(messages: Sequence[Message]) -> str:
    """Several messages as one text, oldest first, each on its own line(s) with its sender and
    its time (UTC): `[10:01:02 UTC] ou_…: text` (pure)."""
    lines = []
    for m in messages:
        at = datetime.fromtimestamp(m.create_time_ms / 1000, UTC).strftime("%H:%M:%S UTC") \
            if m.create_time_ms > 0 else "?"
        lines.append(f"[{at}] {m.sender_open_id or '?'}: {m.text}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Turn:
    """What an agent sees: one message of one chat (or, merged, several: `messages`), and a
    way to learn it was cancelled."""

    message: Message
    """The message the turn answers: merged (busy modes merge, interrupt), the last of
    `messages`."""
    fence: int
    cancelled: Callable[[], bool] = field(default=_never)
    approver: Approver = field(default=_no_approver)
    fetcher: Fetcher = field(default=_no_fetcher)
    messages: tuple[Message, ...] = ()
    """Every message the turn answers, oldest first (busy modes merge and interrupt: those
    sent while the chat was busy or in quick succession); `(message,)` when it is one."""
    reporter: Progress = field(default=no_progress)
    sender: Sender = field(default=_no_sender)
    reader: Recent = field(default=_no_recent)
    former: FormAsker = field(default=_no_form)

    def __post_init__(self) -> None:
        if not self.messages:
            object.__setattr__(self, "messages", (self.message,))

    def fetch(self, attachment: Attachment | str, kind: str = "file") -> bytes:
        """Download an attachment of this turn's messages (one of `attachments`; or a key of
        the turn's last message, `kind` "image" for an image_key, "file" for the others)
        through the open API, up to FEISHU_FETCH_MAX_BYTES (gateway.core.errors.TooLarge
        beyond; RejectedError when Feishu refuses, RetryableError when it fails)."""
        if isinstance(attachment, Attachment):
            return self.fetcher(attachment.message_id or self.message_id, attachment.key,
                                attachment.resource_type)
        return self.fetcher(self.message_id, attachment, kind)

    def send(self, part: Image | File) -> str:
        """Send an image or a file now, as a reply to this turn's message (in its thread):
        uploaded within Feishu's limits (checked when the Image or File was made), under the
        send quota, retried; the n-th send of a turn has a fixed uuid, so a turn run again
        after a crash shows each part once. The sent message's id; RejectedError when Feishu
        refuses it, RetryableError when it keeps failing."""
        return self.sender(part)

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        """Every attachment of the turn's messages, oldest message first, each naming the
        message it came with (what `fetch` takes)."""
        return tuple(replace(a, message_id=m.message_id) for m in self.messages
                     for a in m.attachments)

    def approve(self, prompt: str, timeout_s: float = 300.0, *, key: str | None = None) -> str:
        """Ask the chat to allow something (an interactive card in reply to this turn's
        message; /approve and /deny work too) and wait up to `timeout_s`: "once",
        "session", "always", "deny" or "expired"; "deny" when the turn is stopped meanwhile.
        A "session" or "always" answer is remembered for `key` (default: the prompt), so
        the next ask of this session (or chat) returns it at once."""
        return self.approver(prompt, timeout_s, key)

    def ask(self, title: str, fields: Sequence[FormField], *,
            timeout_s: float = 300.0) -> FormAnswer:
        """Ask the chat to fill in a form (an interactive card in reply to this turn's
        message: text, selects, dates, checkboxes) and wait up to `timeout_s`: its values,
        or `expired`, or `stopped` when the turn is stopped meanwhile. Who may submit
        follows the approvals' rules; a submit is checked against the fields (a required
        one missing, a value not among the options, one too long: refused on the card with
        a toast, never returned). Durable as approvals are: a turn run again waits on the
        same card, and a submit made meanwhile answers at once. ValueError for fields that
        make no form (no field, a name twice, an unknown kind, a select without options)."""
        return self.former(title, tuple(fields), timeout_s)

    def recent(self, count: int = 20) -> tuple[ChatLine, ...]:
        """The chat's last `count` messages (at most 50) before this turn's, oldest first:
        what a group was discussing when the bot was @mentioned, its own answers included.
        Read from Feishu's messages list API once per turn (a later call for as many or
        fewer is answered from that read), under the send quota; in a topic, the topic's.
        RejectedError when Feishu refuses (the bot may not read the chat's history),
        RetryableError when it keeps failing."""
        return self.reader(count)

    def progress(self, step: str) -> None:
        """Tell the chat what the agent is doing now ("searching the wiki…", a tool and its
        argument): shown above the answer while it streams (shortened to one line), and
        listed with the finished steps when it ends. Thread-safe; a no-op once the answer is
        complete, and where nothing streams (docs/agents.md#progress)."""
        self.reporter(step)

    @property
    def chat_id(self) -> str:
        return self.message.chat_id

    @property
    def message_id(self) -> str:
        return self.message.message_id

    @property
    def sender_open_id(self) -> str:
        return self.message.sender_open_id

    @property
    def caught_up(self) -> bool:
        """Whether a message of this turn was sent while the bot was offline (read back
        after an outage, docs/design.md#catch-up): it is answered late, and the reply says
        so."""
        return any(m.caught_up for m in self.messages)

    @property
    def text(self) -> str:
        """The message's text; merged, every message's, each with its sender and time."""
        if len(self.messages) > 1:
            return merged_text(self.messages)
        return self.message.text


@dataclass(frozen=True, slots=True)
class Reaction:
    """A person's reaction added to or removed from one of the bot's answers, as an agent
    factory's `on_reaction(reaction, context)` gets it (docs/agents.md#reactions)."""

    chat_id: str
    answer_id: str
    """The bot's message that was reacted to."""
    turn_message_id: str
    """The message that answer answered ('' when it answered none: a greeting, a post)."""
    emoji: str
    """Feishu's emoji_type: THUMBSUP, THUMBSDOWN, HEART, ..."""
    added: bool
    """Added (True) or taken back (False)."""
    by: str
    """The person's open_id."""
    at_ms: int
    """When (Feishu's action_time)."""
    app_id: str = ""
    thread_id: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


Reply = str | Image | File | Iterable[str | Image | File] | None
"""What `Agent.run` returns: the answer; or its pieces as they come (a streaming model:
they are joined until the Feishu side renders them as they come), images and files among
them (sent after the text, in order: gateway/core/media.py); None for no reply."""


class Agent(Protocol):
    """An agent answers one turn of its session at a time (see docs/agents.md).

    Optional, called on the worker's release lane when the gateway lets the agent go
    (gateway/agents/release.py): `soft_release()` (over the cap, idle, out of date) drops
    clients and in-memory state but keeps what the session's next agent inherits;
    `release()` (/new, shutdown) tears everything down. A factory may have
    `signature(context)` (the configuration its agents are built under: agents of another
    one are rebuilt) and `stateless = True` (its agents keep nothing of a session in memory
    between turns, so a turn another worker process ran leaves them up to date)."""

    def run(self, turn: Turn) -> Reply: ...


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What a worker process hands its agent factory with every build: its own settings,
    Redis client and name, so an agent loads none of them itself."""

    settings: Settings
    redis: redis.Redis
    process_id: str
    """This process among all workers (`host:pid:nonce`, as `feishu-gateway status` names
    it)."""


AgentFactory = Callable[[str, AgentContext], Agent]
"""Agents: `GATEWAY_AGENT` names a factory `factory(session_key, context) -> Agent`
(gateway/agents/__init__.py also accepts `factory(session_key)`)."""

"""Redis key names. The order of `ChatKeys.all` is the KEYS order every per-chat script
expects (see lua/include/chat.lua).

On one Redis (`Keyspace(shards=0)`, the default) per-chat keys carry the hash tag
`{chat_id}` and every chat shares one sweeper index and one control stream. On a Redis
Cluster (`shards=N`) each chat belongs to one of N shards (CRC32 of its id): its keys, its
shard's index and its shard's control stream all carry the shard's hash tag `{s<n>}`, so
every script touches one slot, and the N shards spread over the cluster's masters.

The id a `ChatKeys` is built from is the chat's *state id* (gateway/chats/scope.py): the
Feishu chat id with one app (`gw:{oc_team}:lease`), `<chat_id>@<app_id>` when several apps
share the state (`gw:{oc_team@cli_b}:lease`; on a cluster its shard is the CRC32 of that id).
A topic's state (`oc_team/omt_1`, under the order scope `thread`) keeps its keys under its
chat's hash tag and shard (`gw:{oc_team}/omt_1:lease`), so a script may touch both, and
shares a few of its chat's: the dedupe marks, edits, `left`, `latenote` and `told`
(`ChatKeys.chat_prefix`).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

from gateway.chats.scope import TOPIC, ChatScope, split_topic

INDEX_KEY = "gw:chats"
"""Sorted set: state id → when (server ms) the sweeper should look at the chat next."""

CONTROL_KEY = "gw:control"
"""Stream of control jobs (commands, notices) for the listeners' control desks."""

KEYSPACE_KEY = "gw:keyspace"
"""String: the shard count the chat state was written with (0: one Redis); no TTL."""

MARKS_SINCE_KEY = "gw:marks:since"
"""String: when (Redis ms) dedupe marks were first kept by day in this Redis; 0 when no
earlier layout ever wrote here (lua/include/marks.lua); no TTL."""

UNDELIVERED_KEY = "gw:undelivered"
"""List of the newest replies that were given up (capped), for `feishu-gateway status`."""


@dataclass(frozen=True, slots=True)
class ChatKeys:
    chat_id: str
    shard: int | None = None
    """The chat's shard on a Redis Cluster; None on one Redis."""

    @property
    def prefix(self) -> str:
        """The state's own keys: its chat's (`chat_prefix`), or a topic's beside them."""
        chat_state, thread_id = split_topic(self.chat_id)
        if self.shard is None:
            topic = f"{TOPIC}{thread_id}" if thread_id else ""
            return f"gw:{{{chat_state}}}{topic}"
        return f"{shard_prefix(self.shard)}:c:{self.chat_id}"

    @property
    def chat_prefix(self) -> str:
        """The keys a chat's topics share with it (the same as `prefix` outside topics)."""
        chat_state = split_topic(self.chat_id)[0]
        if self.shard is None:
            return f"gw:{{{chat_state}}}"
        return f"{shard_prefix(self.shard)}:c:{chat_state}"


    @property
    def index(self) -> str:
        return index_key(self.shard)

    @property
    def control(self) -> str:
        return control_key(self.shard)

    def active(self, app_id: str) -> str:
        """The shard's index of the app's recently active chats, for catch-up
        (`active_key`)."""
        return active_key(self.shard, app_id)

    def stream(self, message_id: str) -> str:
        """String: the card entity streaming the answer to `message_id` (a day)."""
        return f"{self.prefix}:stream:{message_id}"

    def live_card(self, fence: int) -> str:
        """Hash: the card the turn of `fence` is streaming now and its text so far, so the
        canceller can close it when the turn's worker is gone (a day; gone once closed)."""
        return f"{self.prefix}:livecard:{fence}"

    def confirmed(self, message_id: str) -> str:
        """String: the command `message_id` was answered with a reaction, so a run of its
        control job again (its listener died) says nothing more (5 minutes)."""
        return f"{self.prefix}:confirmed:{message_id}"

    def stop_shown(self, fence: int) -> str:
        """String: the stopped turn of `fence` put the stop's mark on its answer (its card
        or edited message), so the stop's command gets a reaction, not a second "Stopped."
        (as long as the stop's own record)."""
        return f"{self.prefix}:stopshown:{fence}"

    @property
    def reactions(self) -> str:
        """Hash: the reactions on the chat's answers, by the turn each answered
        (lua/feedback.lua; as long-lived as the history)."""
        return f"{self.prefix}:reactions"

    @property
    def live_cards(self) -> str:
        """Set: the fences of the chat's turns with a live card (a day)."""
        return f"{self.prefix}:livecards"

    @property
    def lease(self) -> str:
        return f"{self.prefix}:lease"

    @property
    def inbox(self) -> str:
        return f"{self.prefix}:inbox"

    @property
    def fence(self) -> str:
        return f"{self.prefix}:fence"

    @property
    def tries(self) -> str:
        return f"{self.prefix}:tries"

    @property
    def stop(self) -> str:
        return f"{self.prefix}:stop"

    @property
    def generation(self) -> str:
        return f"{self.prefix}:gen"

    @property
    def done(self) -> str:
        """List: the chat's last finished turns, newest first (lua/include/history.lua)."""
        return f"{self.prefix}:done"

    @property
    def runners(self) -> str:
        """Hash: which worker process started each session's last turn (lua/mark.lua)."""
        return f"{self.prefix}:runners"

    def ask(self, request_id: str) -> str:
        """One approval request (gateway/approvals)."""
        return f"{self.prefix}:ask:{request_id}"

    @property
    def asking(self) -> str:
        """The id of the chat's pending approval request, for /approve and /deny."""
        return f"{self.prefix}:asking"

    @property
    def allow(self) -> str:
        """What the chat allowed for good ("always") or for a session."""
        return f"{self.prefix}:allow"

    @property
    def told(self) -> str:
        """The chat's user was told their direct message was refused (expires)."""
        return f"{self.chat_prefix}:told"

    def click(self, token: str) -> str:
        """One card click's (or /approve's) token, so a redelivered one counts once."""
        return f"{self.prefix}:click:{token}"

    def command(self, command_id: str) -> str:
        """What one stop command did (so running it again finishes it, never repeats it)."""
        return f"{self.prefix}:cmd:{command_id}"

    def seen(self, message_id: str) -> str:
        """String: one message's dedupe mark in the layout before marks by day (read for
        messages older than the process, whose marks an earlier version may have kept)."""
        return f"{self.chat_prefix}:seen:{message_id}"

    def marks(self, day: int | None, message_id: str) -> str:
        """Hash: the dedupe marks of the chat's messages created on `day` (UTC days since
        the epoch, by Feishu's create_time), a field per message (`mark_field`,
        lua/include/marks.lua); a message without a create time (`day` None) has its own."""
        if day is None:
            return f"{self.chat_prefix}:seen:n:{message_id}"
        return f"{self.chat_prefix}:seen:d{day}"

    def edit(self, message_id: str) -> str:
        """Hash: the newest edit of a message (lua/revise.lua), kept for it when it came
        first."""
        return f"{self.chat_prefix}:edit:{message_id}"

    @property
    def left(self) -> str:
        """String: when the bot was last removed from the chat (lua/evict.lua)."""
        return f"{self.chat_prefix}:left"

    @property
    def late_noted(self) -> str:
        """String: the chat was told lately that its late messages were not answered
        (lua/ingest.lua: one notice for all the messages of one outage)."""
        return f"{self.chat_prefix}:latenote"

    @property
    def all(self) -> list[str]:
        """KEYS 1-8 of every per-chat script (lua/include/chat.lua)."""
        return [self.lease, self.inbox, self.fence, self.tries, self.stop,
                self.generation, self.index, self.control]

def turn_task_id(chat_id: str, message_id: str, fence: int | str) -> str:
    """Readable in Flower and on the CLI: which chat, which message, which lease (`fence`
    as issued, or as Redis keeps it)."""
    return f"turn:{chat_id}:{message_id}:{fence}"


DAY_MS = 86_400_000
FEISHU_MESSAGE_ID = re.compile(r"om_[0-9a-f]{32}")


def mark_field(message_id: str) -> bytes:
    """A message's field in its chat's dedupe marks: a Feishu message id (`om_` and 32 hex
    digits) packed into its 16 bytes after a zero byte, any other id as its text (which
    never holds a zero byte)."""
    if FEISHU_MESSAGE_ID.fullmatch(message_id):
        return b"\0" + bytes.fromhex(message_id[3:])
    return message_id.encode()


def marks_expire_at(day: int | None, ttl_s: int) -> int:
    """When (unix s) the marks of `day` expire: `ttl_s` after the day ends; 0 for a message
    without a create time (its marks expire `ttl_s` after its last mark)."""
    return 0 if day is None else (day + 1) * DAY_MS // 1000 + ttl_s


def day_of(create_ms: int) -> int | None:
    """The day (UTC, since the epoch) of a Feishu create_time; None when it is unknown."""
    return create_ms // DAY_MS if create_ms > 0 else None


def shard_prefix(shard: int) -> str:
    return f"gw:{{s{shard}}}"


def index_key(shard: int | None) -> str:
    """The sweeper index of a shard (None: the one index of one Redis)."""
    return INDEX_KEY if shard is None else f"{shard_prefix(shard)}:chats"


def clock_key(index: str) -> str:
    """Beside a sweeper index (its slot too): the last server time its sweepers saw, by which
    due.lua tells a step back of Redis's clock."""
    return f"{index}:clock"


def active_key(shard: int | None, app_id: str) -> str:
    """Beside a sweeper index (its slot too), one per app (a busy app never pushes a quiet
    one's chats out): sorted set `<app_id>|<chat_type>|<chat_id>` → when (server ms) a
    message of that chat was last admitted, the newest FEISHU_CATCHUP_MAX_CHATS kept
    (lua/ingest.lua), read by catch-up (gateway/chats/active.py)."""
    return f"{index_key(shard)}:active:{app_id}"


def control_key(shard: int | None) -> str:
    """The control stream of a shard (None: the one stream of one Redis)."""
    return CONTROL_KEY if shard is None else f"{shard_prefix(shard)}:control"


@dataclass(frozen=True, slots=True)
class Keyspace:
    """Where each chat's keys live: one Redis (`shards=0`) or N shards of a Redis Cluster."""

    shards: int = 0
    scope: ChatScope = field(default_factory=ChatScope)
    """How a message's state id is named (by chat, or by chat and app)."""

    def chat(self, chat_id: str) -> ChatKeys:
        """The keys of the state `chat_id` names (a state id, gateway/chats/scope.py)."""
        if self.shards <= 0:
            return ChatKeys(chat_id)
        chat_state = split_topic(chat_id)[0]  # (a topic lives in its chat's shard)
        return ChatKeys(chat_id, zlib.crc32(chat_state.encode()) % self.shards)

    @property
    def _shard_numbers(self) -> list[int | None]:
        return list(range(self.shards)) if self.shards > 0 else [None]

    @property
    def indexes(self) -> list[str]:
        """Every sweeper index (one per shard)."""
        return [index_key(n) for n in self._shard_numbers]

    def actives(self, app_id: str) -> list[str]:
        """Every index of the app's recently active chats (one per shard)."""
        return [active_key(n, app_id) for n in self._shard_numbers]

    @property
    def controls(self) -> list[str]:
        """Every control stream (one per shard)."""
        return [control_key(n) for n in self._shard_numbers]

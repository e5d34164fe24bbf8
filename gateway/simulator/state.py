"""Thread-safe record of what happened on the simulator: messages, ACKs, requests."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from gateway.simulator.cards import CardStore
from gateway.simulator.ratelimit import RateLimiter
from gateway.simulator.records import Ack, MessageRecord, SentFrame, SentMessage, to_sent_message
from gateway.simulator.resources import ResourceStore, UploadStore

T = TypeVar("T")


class SimState:
    """All mutable simulator state behind one condition variable."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._messages: dict[str, MessageRecord] = {}
        self._bot_order: list[str] = []
        self._uuids: dict[tuple[str | None, str], str] = {}
        self._reactions: dict[str, dict[str, str]] = {}
        self._acks: list[Ack] = []
        self._frames: dict[str, SentFrame] = {}
        self._delivered: set[str] = set()  # message ids written to a connection
        self._sent_frames: list[str] = []  # frame ids written to a connection (or POSTed)
        self._counters: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._connections: dict[str, int] = {}
        self._silent = 0
        self._close_codes: list[int | None] = []
        self._p2p_chats: dict[tuple[str, str], str] = {}
        self._token_generation = 0
        self._withdrawn: set[str] = set()
        self._outside: set[tuple[str, str]] = set()  # (app_id, chat_id): the bot was removed
        self.cards = CardStore(self._cond)
        self.resources = ResourceStore()
        self.uploads = UploadStore()
        self.after_bot_message: Callable[[MessageRecord], None] | None = None
        """A test's hook on each new bot message (Controls.on_bot_message)."""
        """What the apps uploaded for their bots to send (uploads.py)."""
        self.limiter = RateLimiter()

    def _notify(self) -> None:
        self._cond.notify_all()

    def wait_for(self, probe: Callable[[], T | None], timeout_s: float,
                 describe: Callable[[], str]) -> T:
        """Poll `probe` (called under the lock) until it returns non-None or the deadline."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                result = probe()
                if result is not None:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"simulator: timed out after {timeout_s:g} s: {describe()}")
                self._cond.wait(min(remaining, 0.1))

    # requests and connections
    def record_request(self, path: str) -> None:
        with self._cond:
            self._requests[path] += 1
            self._notify()

    def requests_count(self, path_prefix: str) -> int:
        with self._cond:
            return sum(n for p, n in self._requests.items() if p.startswith(path_prefix))

    def set_connections(self, per_app: dict[str, int], silent: int) -> None:
        """Live (not silent) connections per app id, and how many silent ones are open."""
        with self._cond:
            self._connections, self._silent = dict(per_app), silent
            self._notify()

    @property
    def connection_count(self) -> int:
        """Live connections of every app; silent ones are not counted."""
        with self._cond:
            return sum(self._connections.values())

    def connections_of(self, app_id: str | None) -> int:
        """Live connections of one app (None: of every app)."""
        with self._cond:
            if app_id is None:
                return sum(self._connections.values())
            return self._connections.get(app_id, 0)

    @property
    def silent_count(self) -> int:
        """Connections that went silent and are still open."""
        with self._cond:
            return self._silent

    def record_close(self, code: int | None) -> None:
        """A connection ended: the client's close code, None when it sent no close frame."""
        with self._cond:
            self._close_codes.append(code)
            self._notify()

    @property
    def close_codes(self) -> list[int | None]:
        with self._cond:
            return list(self._close_codes)

    @property
    def token_generation(self) -> int:
        with self._cond:
            return self._token_generation

    def expire_tokens(self) -> None:
        with self._cond:
            self._token_generation += 1

    def remember_p2p_chat(self, app_id: str, open_id: str, chat_id: str) -> None:
        """The p2p chat between a user and one app's bot."""
        with self._cond:
            self._p2p_chats[(app_id, open_id)] = chat_id

    def set_member(self, app_id: str, chat_id: str, member: bool) -> None:
        """The app's bot was added to (True) or removed from (False) the chat."""
        with self._cond:
            (self._outside.discard if member else self._outside.add)((app_id, chat_id))
            self._notify()

    def is_outside(self, app_id: str, chat_id: str) -> bool:
        with self._cond:
            return (app_id, chat_id) in self._outside

    def last_message(self, chat_id: str) -> MessageRecord | None:
        """The newest message of a chat (by create time), a user's or a bot's."""
        with self._cond:
            recs = [r for r in self._messages.values() if r.chat_id == chat_id]
            return max(recs, key=lambda r: r.create_time_ms, default=None)

    def history(self, chat_id: str) -> list[MessageRecord]:
        """Every message of a chat (users' and bots', withdrawn ones gone), not those inside
        a forward, in no particular order: what the messages list API reads."""
        with self._cond:
            return [r for r in self._messages.values()
                    if r.chat_id == chat_id and r.upper_message_id is None]

    def thread_history(self, thread_id: str) -> list[MessageRecord]:
        """Every message of a thread (its root included), in no particular order."""
        with self._cond:
            return [r for r in self._messages.values()
                    if r.thread_id == thread_id and r.upper_message_id is None]

    def p2p_chat(self, app_id: str, open_id: str) -> str | None:
        with self._cond:
            return self._p2p_chats.get((app_id, open_id))

    # counters (faults, send attempts, redeliveries)
    def bump(self, name: str, by: int = 1) -> None:
        with self._cond:
            self._counters[name] += by
            self._notify()

    def counter(self, name: str) -> int:
        with self._cond:
            return self._counters[name]

    def counters(self, prefix: str) -> dict[str, int]:
        """Non-zero counters whose name starts with `prefix`, keyed without it."""
        with self._cond:
            return {k.removeprefix(prefix): n for k, n in self._counters.items()
                    if k.startswith(prefix) and n}

    # frames and ACKs
    def record_frame(self, frame_id: str, payload: bytes, message_id: str | None,
                     event_key: str | None = None, *, app_id: str | None = None,
                     card_message_id: str | None = None) -> None:
        """Remember a frame; `event_key` groups redeliveries (default: this frame's id);
        `card_message_id` marks a card callback (the clicked message)."""
        with self._cond:
            self._frames[frame_id] = SentFrame(payload, time.monotonic(), message_id,
                                               event_key or frame_id, app_id, card_message_id)

    def mark_sent(self, frame_id: str) -> None:
        """The frame is being written to a connection now: ACK latency counts from here."""
        with self._cond:
            frame = self._frames.get(frame_id)
            if frame is not None:
                self._frames[frame_id] = dataclasses.replace(frame, sent_at=time.monotonic())
                self._sent_frames.append(frame_id)
                if frame.message_id is not None:
                    self._delivered.add(frame.message_id)

    def unacked_frames(self) -> list[tuple[str, str | None]]:
        """(frame id, message id) of every frame written to a client (or pushed) that got no
        ACK (or HTTP answer) back, in order."""
        with self._cond:
            acked = {ack.frame_message_id for ack in self._acks}
            return [(f, self._frames[f].message_id) for f in self._sent_frames
                    if f not in acked]

    def frames_of(self, message_id: str) -> list[tuple[str, SentFrame, bool, list[int]]]:
        """Every frame that carried a Feishu message, oldest first: (frame id, frame,
        written to a client, the codes of its ACKs)."""
        with self._cond:
            written = set(self._sent_frames)
            codes: dict[str, list[int]] = {}
            for ack in self._acks:
                codes.setdefault(ack.frame_message_id, []).append(ack.code)
            return [(f, frame, f in written, codes.get(f, []))
                    for f, frame in self._frames.items() if frame.message_id == message_id]

    def find_frame(self, key: str, app_id: str | None = None) -> SentFrame | None:
        """The frame with this id, or the last frame sent for this Feishu message id (to
        `app_id`, when given: a group message goes to each bot it mentions as its own
        event)."""
        with self._cond:
            frame = self._frames.get(key)
            if frame is None:
                frame = next((f for f in reversed(self._frames.values()) if f.message_id == key
                              and app_id in (None, f.app_id)), None)
            return frame

    def find_payload(self, key: str) -> tuple[bytes, str | None] | None:
        """The event payload last sent for a frame id or a Feishu message id."""
        frame = self.find_frame(key)
        return None if frame is None else (frame.payload, frame.message_id)

    def record_ack(self, frame_id: str, code: int, data: dict[str, Any] | None,
                   biz_rt_ms: int | None) -> Ack:
        with self._cond:
            frame = self._frames.get(frame_id)
            latency = -1.0 if frame is None else (time.monotonic() - frame.sent_at) * 1000
            ack = Ack(frame_id, code, latency, data, biz_rt_ms,
                      None if frame is None else frame.message_id, time.time())
            self._acks.append(ack)
            self._notify()
            return ack

    @property
    def acks(self) -> list[Ack]:
        with self._cond:
            return list(self._acks)

    # messages
    def put_message(self, rec: MessageRecord) -> None:
        """Store a message delivered to the bot (or overwrite one with the same id)."""
        with self._cond:
            self._messages[rec.message_id] = rec
            self._notify()

    def remove_message(self, message_id: str) -> None:
        """The message is withdrawn: gone, and remembered as withdrawn."""
        with self._cond:
            if self._messages.pop(message_id, None) is not None:
                self._withdrawn.add(message_id)
            self._notify()

    def withdrawn(self, message_id: str) -> bool:
        with self._cond:
            return message_id in self._withdrawn

    def get_message(self, message_id: str) -> MessageRecord | None:
        with self._cond:
            return self._messages.get(message_id)

    def children_of(self, message_id: str) -> list[MessageRecord]:
        """The messages a merge_forward carries, in order, nested ones after their own
        merge_forward (depth first), as Feishu lists them."""
        with self._cond:
            direct = [r for r in self._messages.values() if r.upper_message_id == message_id]
            return [x for r in direct for x in (r, *self.children_of(r.message_id))]

    def by_uuid(self, app_id: str | None, uuid: str | None) -> MessageRecord | None:
        """The message an app already sent with this uuid (None without a uuid)."""
        with self._cond:
            known = self._uuids.get((app_id, uuid)) if uuid else None
            return None if known is None else self._messages.get(known)

    def view(self, rec: MessageRecord) -> SentMessage:
        """The public view of a message, showing its card entity as it is now."""
        card = self.cards.view(rec.card_id) if rec.card_id else None
        view = to_sent_message(rec, card)
        if rec.msg_type in ("image", "file"):  # what it shows: the resource's name and size
            key = view.content.get("image_key") or view.content.get("file_key")
            found = self.resources.get(rec.message_id, key) if isinstance(key, str) else None
            if found is not None:
                view = dataclasses.replace(
                    view, text=f"[{rec.msg_type} {found.name}, {len(found.data):,} bytes]")
        return view

    def add_bot_message(self, rec: MessageRecord) -> tuple[MessageRecord, bool]:
        """Store a bot message unless its app already sent one with its uuid: then return
        the original, False."""
        with self._cond:
            key = (rec.app_id, rec.uuid or "")
            if rec.uuid is not None and key in self._uuids:
                return self._messages[self._uuids[key]], False
            if rec.uuid is not None:
                self._uuids[key] = rec.message_id
            self._messages[rec.message_id] = rec
            self._bot_order.append(rec.message_id)
            self._notify()
        hook = self.after_bot_message
        if hook is not None:
            hook(rec)
        return rec, True

    def edit_message(self, message_id: str, msg_type: str, content: str) -> MessageRecord | None:
        """Replace a message's content, keeping the old one in history; None when unknown."""
        with self._cond:
            old = self._messages.get(message_id)
            if old is None:
                return None
            new = dataclasses.replace(
                old, msg_type=msg_type, content=content, updated=True,
                update_time_ms=int(time.time() * 1000), history=(*old.history, old.content),
            )
            self._messages[message_id] = new
            self._notify()
            return new

    def _bot_records(self, chat_id: str | None, app_id: str | None) -> list[MessageRecord]:
        recs = (self._messages[m] for m in self._bot_order if m in self._messages)
        return [r for r in recs if (chat_id is None or r.chat_id == chat_id)
                and (app_id is None or r.app_id == app_id)]

    def bot_messages(self, chat_id: str | None = None,
                     app_id: str | None = None) -> list[SentMessage]:
        """Bot messages in order, optionally of one chat and/or sent by one app."""
        with self._cond:
            recs = self._bot_records(chat_id, app_id)
        return [self.view(r) for r in recs]

    def user_records(self, chat_id: str) -> list[MessageRecord]:
        """The messages users sent in a chat that reached a bot (written to its connection;
        those inside a forward not counted), in the order the simulator took them."""
        with self._cond:
            return [r for r in self._messages.values() if r.chat_id == chat_id
                    and not r.from_bot and r.message_id in self._delivered]

    def count_bot_messages(self, chat_id: str | None, app_id: str | None = None) -> int:
        with self._cond:
            return len(self._bot_records(chat_id, app_id))

    # reactions
    def add_reaction(self, message_id: str, reaction_id: str, emoji_type: str) -> None:
        with self._cond:
            self._reactions.setdefault(message_id, {})[reaction_id] = emoji_type
            self._notify()

    def delete_reaction(self, message_id: str, reaction_id: str) -> str | None:
        """Remove a reaction; returns its emoji type, or None when it does not exist."""
        with self._cond:
            emoji = self._reactions.get(message_id, {}).pop(reaction_id, None)
            self._notify()
            return emoji

    def reaction_of(self, message_id: str, emoji_type: str) -> str | None:
        """The id of a reaction of this emoji on the message, if one stands."""
        with self._cond:
            return next((rid for rid, e in self._reactions.get(message_id, {}).items()
                         if e == emoji_type), None)

    def reactions(self, message_id: str) -> list[str]:
        with self._cond:
            return list(self._reactions.get(message_id, {}).values())

"""Messages the bot starts (`feishu-gateway send`, the `gateway.post_message` task): a
reminder, a report, a build result. Each enters its chat's queue as a message of its own, so
it goes out in the chat's order (after the answer a turn is streaming, never in the middle
of it), through the worker's send path: the shared quota, retries, and uuids fixed by its
idempotency key. A command or task run again with the same key posts once: its message id
derives from the key, and the chat's dedupe marks refuse it a second time
(GATEWAY_DEDUPE_TTL_S).

Under the order scope `thread` a message into a topic (`thread_id`) enters that topic's
queue; the worker posts it as a reply in the thread to the topic's first message.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.core.errors import Refused
from gateway.core.model import OUTBOUND, OUTBOUND_CARD, Message

KEY_SHAPE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""A key kept as it is in the message id (longer or other keys are digested)."""
ID_SHAPE = re.compile(r"o[a-z]{1,3}_[A-Za-z0-9_-]{1,120}")
"""A Feishu chat or thread id (`oc_…`, `omt_…`)."""


@dataclass(frozen=True, slots=True)
class Outbound:
    """One message the bot starts."""

    chat_id: str
    key: str
    """Its idempotency key: the same key posts once."""
    text: str = ""
    """Markdown, sent as the bot's replies are (FEISHU_REPLY_FORMAT); or"""
    card: Mapping[str, Any] | None = field(default=None)
    """a card's JSON (an interactive message), sent as it is; or"""
    media: str = ""
    """an image or file uploaded already (its media piece, gateway/core/media.py)."""
    thread_id: str = ""
    """The topic to post in (`omt_…`); "" for the chat itself."""
    app_id: str = ""
    """The app to post as, when several serve (FEISHU_APPS) and it is not the first."""


def message_id_of(key: str) -> str:
    """The message id a key's message has in its chat's queue and history (pure)."""
    if KEY_SHAPE.fullmatch(key):
        return f"send_{key}"
    return "send_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def outbound_message(out: Outbound, *, max_text_chars: int) -> Message:
    """The queued message of `out`; Refused with one line for what cannot be sent (pure)."""
    if not ID_SHAPE.fullmatch(out.chat_id) or not out.chat_id.startswith("oc_"):
        raise Refused(f"{out.chat_id!r} is no chat id (they read oc_…)")
    if out.thread_id and (not ID_SHAPE.fullmatch(out.thread_id)
                          or not out.thread_id.startswith("omt_")):
        raise Refused(f"{out.thread_id!r} is no thread id (they read omt_…)")
    if not out.key or len(out.key) > 512:
        raise Refused("an idempotency key of 1 to 512 characters is needed")
    if [bool(out.text.strip()), out.card is not None, bool(out.media)].count(True) != 1:
        raise Refused("say one thing: a text, a card, an image or a file")
    if out.card is not None:
        body = json.dumps(dict(out.card), ensure_ascii=False, separators=(",", ":"))
        kind = OUTBOUND_CARD
    else:
        body, kind = out.text or out.media, OUTBOUND
    if len(body) > max_text_chars:
        raise Refused(f"the message is {len(body)} characters; at most {max_text_chars} "
                      "(GATEWAY_MAX_TEXT_CHARS)")
    return Message(message_id=message_id_of(out.key), chat_id=out.chat_id, chat_type="",
                   sender_open_id="", message_type=kind, text=body, thread_id=out.thread_id,
                   app_id=out.app_id)


@dataclass(frozen=True, slots=True)
class Posted:
    """What posting did: `queued` (it waits behind `waiting` messages of its chat or
    topic), `claimed` (its chat was idle: its turn is published), `duplicate` (its key
    posted already), `full` (the chat's queue is full: not posted) or `left` (the bot was
    removed from the chat)."""

    outcome: str
    message_id: str
    state: str
    waiting: int = 0

    def describe(self) -> str:
        where = f"chat {self.state}"
        return {
            "claimed": f"{self.message_id} posts to {where} now",
            "queued": f"{self.message_id} posts to {where} after the {self.waiting} "
                      "message(s) before it",
            "duplicate": f"{self.message_id}: this key posted to {where} already; "
                         "nothing more done",
        }.get(self.outcome, f"{self.message_id} not posted to {where}: {self.outcome}")


def post(store: ChatStore, publish: Callable[[TurnRef], object], out: Outbound, *,
         sender_app: str, max_text_chars: int) -> Posted:
    """Queue `out` in its chat (or topic) and publish its turn when the chat was idle.
    `sender_app`: the app it goes out as (its chat is marked active for that app's
    catch-up, as a user's message marks it)."""
    message = outbound_message(out, max_text_chars=max_text_chars)
    admitted = store.inbox.ingest(message, app_id=sender_app)
    if admitted.claimed is not None:
        publish(admitted.claimed)
    state = store.keyspace.scope.of_message(message)
    return Posted(admitted.outcome, message.message_id, state, admitted.waiting)

"""Approval requests and forms in Redis: opened by a turn, decided (or a form submitted) by
any listener, settled by the turn (approvals/lua/: ask.lua, decide.lua, submit.lua,
settle.lua; keys in gateway/chats/keys.py). A form is a request whose `key` is FORM_KEY and
whose `prompt` is its spec (forms.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from gateway.approvals.forms import FORM_KEY
from gateway.chats.keys import Keyspace
from gateway.core.model import Message
from gateway.core.scripts import pack, register

KEEP_S = 86_400
"""A request is remembered this long (a late click is told it expired or was decided)."""
REMEMBER_S = 30 * 86_400
""""always" and "session" decisions are remembered this long after the last one."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Request:
    request_id: str
    chat_id: str
    state: str
    prompt: str = ""
    requester: str = ""
    chat_type: str = ""
    message_id: str = ""
    app_id: str = ""
    by: str = ""
    via: str = ""
    card: str = ""
    key: str = ""
    values: str = ""
    """A submitted form's values (JSON)."""

    @property
    def is_form(self) -> bool:
        return self.key == FORM_KEY

    def form_values(self) -> dict[str, Any]:
        """A submitted form's values ({} before, or when they cannot be read)."""
        try:
            read = json.loads(self.values) if self.values else {}
        except ValueError:
            return {}
        return read if isinstance(read, dict) else {}

    @classmethod
    def from_hash(cls, request_id: str, chat_id: str, raw: dict[Any, Any]) -> Request:
        data = {_text(k): _text(v) for k, v in raw.items()}
        return cls(request_id, chat_id, data.get("state", ""), data.get("prompt", ""),
                   data.get("requester", ""), data.get("chat_type", ""),
                   data.get("message_id", ""), data.get("app_id", ""), data.get("by", ""),
                   data.get("via", ""), data.get("card", ""), data.get("key", ""),
                   data.get("values", ""))


@dataclass(frozen=True)
class Opened:
    """What asking found (ApprovalBook.open)."""

    kind: str
    """remembered | asked | reopened | again (this request was asked before)."""
    state: str
    """pending, a decision, expired or stopped; for `remembered`: always | session."""
    left_ms: int = 0
    """Until the request expires (counted from the ask that opened it; may be <= 0)."""
    by: str = ""
    via: str = ""
    card: str = ""
    """The card's message id, once one was recorded."""


class ApprovalBook:
    def __init__(self, client: redis.Redis, keyspace: Keyspace | None = None, *,
                 keep_s: int = KEEP_S, remember_s: int = REMEMBER_S) -> None:
        self.redis = client
        self.keyspace = keyspace or Keyspace()
        self.keep_s, self.remember_s = keep_s, remember_s
        self._scripts = register(client, "gateway.approvals")

    def chat_of(self, message: Message) -> str:
        """The state id (gateway/chats/scope.py) a message's requests are kept under: the
        chat's, or with several apps the chat's as the app it came to sees it; every other
        method takes it as `chat_id`."""
        return self.keyspace.scope.of_message(message)

    def open(self, message: Message, request_id: str, key: str, prompt: str,
             timeout_ms: int) -> Opened:
        """Ask `prompt` under `request_id` (lua/ask.lua): remembered, asked anew, or the
        request this id already has (`again`, as it stands; `reopened` when it asked
        another question)."""
        k = self.keyspace.chat(self.chat_of(message))
        reply = [_text(x) for x in self._scripts["ask"](
            keys=[k.ask(request_id), k.asking, k.allow, k.generation],
            args=[request_id, key, prompt, timeout_ms, pack({
                "requester": message.sender_open_id, "chat_type": message.chat_type,
                "message_id": message.message_id, "app_id": message.app_id,
                "chat_id": message.chat_id, "keep_s": self.keep_s})])]
        if reply[0] == "remembered":
            return Opened("remembered", reply[1])
        return Opened(reply[0], reply[1], int(reply[2]), reply[3], reply[4], reply[5])

    def get(self, chat_id: str, request_id: str) -> Request | None:
        raw = self.redis.hgetall(self.keyspace.chat(chat_id).ask(request_id))
        return Request.from_hash(request_id, chat_id, raw) if raw else None

    def pending(self, chat_id: str) -> Request | None:
        """The chat's pending request (for /approve and /deny), if any."""
        request_id = self.redis.get(self.keyspace.chat(chat_id).asking)
        return None if request_id is None else self.get(chat_id, _text(request_id))

    def decide(self, chat_id: str, request_id: str, decision: str, by: str, via: str,
               token: str) -> tuple[str, str, str]:
        """(outcome, state, by): decided | duplicate | already | expired | unknown."""
        k = self.keyspace.chat(chat_id)
        reply = [_text(x) for x in self._scripts["decide"](
            keys=[k.ask(request_id), k.asking, k.allow, k.click(token)],
            args=[request_id, decision, by, via, self.keep_s, self.remember_s])]
        reply += [""] * (3 - len(reply))
        return reply[0], reply[1], reply[2]

    def submit(self, chat_id: str, request_id: str, values: str, by: str,
               token: str) -> tuple[str, str, str]:
        """(outcome, state, by): submitted | duplicate | already | expired | unknown."""
        k = self.keyspace.chat(chat_id)
        reply = [_text(x) for x in self._scripts["submit"](
            keys=[k.ask(request_id), k.asking, k.click(token)],
            args=[request_id, values, by, self.keep_s])]
        reply += [""] * (3 - len(reply))
        return reply[0], reply[1], reply[2]

    def settle(self, chat_id: str, request_id: str, state: str) -> tuple[str, str, str]:
        """(state, by, via) the request ended as: `state` unless a decision came first."""
        k = self.keyspace.chat(chat_id)
        reply = self._scripts["settle"](keys=[k.ask(request_id), k.asking],
                                        args=[request_id, state])
        return _text(reply[0]), _text(reply[1]), _text(reply[2])

    def state(self, chat_id: str, request_id: str) -> str:
        value = self.redis.hget(self.keyspace.chat(chat_id).ask(request_id), "state")
        return "" if value is None else _text(value)

    def set_card(self, chat_id: str, request_id: str, card_message_id: str) -> None:
        key = self.keyspace.chat(chat_id).ask(request_id)
        with self.redis.pipeline(transaction=False) as pipe:  # never a hash without a TTL
            pipe.hset(key, "card", card_message_id)
            pipe.expire(key, self.keep_s)
            pipe.execute()

"""The messages list API (`GET /open-apis/im/v1/messages?container_id_type=chat&...`): a
chat's history between two times (seconds), oldest or newest first, in pages
(`page_size` 1-50, default 20; an opaque `page_token`; `has_more`), as Feishu answers it.
Its controls: faults (5xx, HTML, rate limits) scripted for the next calls, a pause after a
number of calls (a listener killed mid-read), and the log of every call."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.callers import authorize
from gateway.simulator.faults import Fault, FaultPlan, fault_response, parse_kind
from gateway.simulator.records import MessageRecord
from gateway.simulator.state import SimState
from gateway.simulator.wire import ApiError, ok

PATH = "/open-apis/im/v1/messages"
LIST_KINDS = frozenset({"5xx-json", "5xx-html", "429", "400-ratelimit"})
SORTS = ("ByCreateTimeAsc", "ByCreateTimeDesc")
PAGE_SIZE_MAX = 50
PAGE_SIZE_DEFAULT = 20


@dataclass(frozen=True)
class ListCall:
    """One call of the list API that was answered with messages."""

    app_id: str
    chat_id: str
    page_token: str
    items: tuple[str, ...]
    """The message ids it answered, in order."""


def encode_token(chat_id: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{chat_id}:{offset}".encode()).decode()


def decode_token(token: str, chat_id: str) -> int:
    """The offset a page token names; ApiError when it is not one of this chat's."""
    try:
        chat, _, offset = base64.urlsafe_b64decode(token.encode()).decode().rpartition(":")
        if chat == chat_id and offset.isdigit():
            return int(offset)
    except ValueError:
        pass
    raise ApiError(c.CODE_FIELD_VALIDATION, f"field validation failed: page_token={token!r}")


def _int(query: Any, name: str, default: int | None) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.lstrip("-").isdigit():
        raise ApiError(c.CODE_FIELD_VALIDATION, f"field validation failed: {name}={raw!r}")
    return int(raw)


def select(records: Iterable[MessageRecord], start_s: int | None, end_s: int | None,
           sort: str) -> list[MessageRecord]:
    """The records created within [start_s, end_s] (seconds, inclusive), sorted by create
    time, ties in the order the simulator took them (pure)."""
    found = [r for r in records if (start_s is None or r.create_time_ms // 1000 >= start_s)
             and (end_s is None or r.create_time_ms // 1000 <= end_s)]
    ordered = sorted(found, key=lambda r: r.create_time_ms)
    return ordered[::-1] if sort == SORTS[1] else ordered


class Listing:
    """The list API's faults, pause and call log (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: deque[tuple[str, int | None]] = deque()
        self._budget: int | None = None
        self._calls: list[ListCall] = []

    def script(self, kinds: Iterable[str]) -> None:
        parsed = [parse_kind(k, LIST_KINDS) for k in kinds]
        with self._lock:
            self._faults.extend(parsed)

    def clear(self) -> None:
        """Drop the scripted faults not used yet."""
        with self._lock:
            self._faults.clear()

    def next_fault(self, plan: FaultPlan) -> Fault | None:
        with self._lock:
            if not self._faults:
                return None
            kind, status = self._faults.popleft()
        return plan.fault_of(kind, status)

    def pause(self, after: int = 0) -> None:
        with self._lock:
            self._budget = after

    def resume(self) -> None:
        with self._lock:
            self._budget = None

    def may_answer(self) -> bool:
        """Whether a call may be answered now (counted against the pause's budget)."""
        with self._lock:
            if self._budget is None:
                return True
            if self._budget > 0:
                self._budget -= 1
                return True
            return False

    def record(self, call: ListCall) -> None:
        with self._lock:
            self._calls.append(call)

    @property
    def calls(self) -> list[ListCall]:
        with self._lock:
            return list(self._calls)


class ListingApi:
    def __init__(self, apps: AppRegistry, state: SimState, faults: FaultPlan,
                 listing: Listing, item: Callable[[MessageRecord, str], dict[str, Any]]) -> None:
        self.apps, self.state, self.faults = apps, state, faults
        self.listing, self._item = listing, item

    def routes(self) -> list[web.RouteDef]:
        return [web.get(PATH, self.list_messages)]

    async def list_messages(self, request: web.Request) -> web.Response:
        fault = self.listing.next_fault(self.faults)
        if fault is not None:
            self.state.bump(f"fault:list:{fault.kind}")
            return fault_response(fault)
        while not self.listing.may_answer():  # paused: the caller waits (or gives up)
            await asyncio.sleep(0.05)
        app = authorize(request, self.apps, self.state)
        q = request.query
        kind = q.get("container_id_type")
        if kind not in ("chat", "thread") or not q.get("container_id"):
            raise ApiError(c.CODE_FIELD_VALIDATION,
                           "field validation failed: container_id_type=chat (or thread) and "
                           "a container_id are required")
        chat_id, sort = q["container_id"], q.get("sort_type", SORTS[0])
        records = self.state.history(chat_id)
        if kind == "thread":  # (a thread's messages; its chat is its root's)
            records = self.state.thread_history(chat_id)
            if not records:
                raise ApiError(c.CODE_FIELD_VALIDATION, f"thread {chat_id} not found")
            chat_id = records[0].chat_id
        size = _int(q, "page_size", PAGE_SIZE_DEFAULT) or 0
        if sort not in SORTS or not 1 <= size <= PAGE_SIZE_MAX:
            raise ApiError(c.CODE_FIELD_VALIDATION,
                           f"field validation failed: sort_type={sort!r} page_size={size}")
        if self.state.is_outside(app.app_id, chat_id):
            raise ApiError(c.CODE_BOT_NOT_IN_CHAT, "Bot is not in the chat.")
        token = q.get("page_token", "")
        offset = decode_token(token, chat_id) if token else 0
        found = select(records, _int(q, "start_time", None),
                       _int(q, "end_time", None), sort)
        page = found[offset:offset + size]
        more = offset + size < len(found)
        self.listing.record(ListCall(app.app_id, chat_id, token,
                                     tuple(r.message_id for r in page)))
        return ok({"items": [self._item(r, "open_id") for r in page], "has_more": more,
                   "page_token": encode_token(chat_id, offset + size) if more else ""})

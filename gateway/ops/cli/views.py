"""What the read commands show, as plain JSON-able dicts (`--json` prints them as they are;
gateway/ops/cli/show.py renders them for people)."""

from __future__ import annotations

import json
import time
from typing import Any

from gateway.agents.report import view
from gateway.chats.history import read_history
from gateway.chats.keys import turn_task_id
from gateway.chats.scope import topic_of
from gateway.chats.store import ChatStore
from gateway.chats.store_types import entry_parts, text_of

TEXT_CHARS = 60
"""Message texts are shortened to this many characters (a view is not a transcript)."""
CHATS_SCAN_MAX = 10_000
"""`chats` ranks at most this many active chats (a fleet's worth; more is reported)."""


def short(text: str, chars: int = TEXT_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def turn_view(store: ChatStore, chat_id: str, now_ms: int) -> dict[str, Any] | None:
    """The chat's turn (claimed, queued or running), or None when it is idle."""
    k = store.keys(chat_id)
    with store.redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(k.lease)
        pipe.pttl(k.lease)
        pipe.hget(k.tries, "n")
        pipe.hget(k.stop, "fence")
        pipe.hmget(k.tries, "busy", "batch")
        raw, ttl_ms, attempt, stop_fence, (busy, batch) = pipe.execute()
    lease = {text_of(a): text_of(b) for a, b in raw.items()}
    if not lease:
        return None
    since_ms = int(lease.get("since_ms") or now_ms)
    message_id, fence = lease.get("message_id", ""), lease.get("fence", "")
    return {"state": lease.get("state", ""), "task_id": lease.get("task_id") or None,
            "turn_id": turn_task_id(chat_id, message_id, int(fence or 0)),
            "message_id": message_id, "fence": fence,
            "worker": lease.get("worker") or None, "since_ms": since_ms,
            "for_s": round(max(0, now_ms - since_ms) / 1000, 1),
            "attempt": int(attempt or 0), "requeues": int(lease.get("requeues") or 0),
            "lease_ttl_s": round(max(0, int(ttl_ms)) / 1000, 1),
            "stopping": stop_fence is not None and text_of(stop_fence) == lease.get("fence"),
            "busy": lease.get("busy") or (text_of(busy) if busy else "queue"),
            "merged": [entry_parts(str(e))[0] for e in json.loads(text_of(batch))]
            if batch else []}


def chat_view(store: ChatStore, chat_id: str, *, first: int = 5,
              busy_here: str = "queue") -> dict[str, Any]:
    """One chat's whole state: its busy mode (the one its state in Redis keeps, written by
    its last message's admission under the listeners' settings; None while it is idle and
    keeps none), its turn, what waits, its session and its last turns. `busy_here`: the
    mode this process's settings give the chat (shown only while Redis keeps none)."""
    now_ms = store.server_ms()
    k = store.keys(chat_id)
    pending = store.pending(chat_id)
    reactions = store.feedback.reactions(chat_id)
    generation = store.redis.get(k.generation)
    session_ttl_ms = int(store.redis.pttl(k.generation))
    view: dict[str, Any] = {
        "chat_id": chat_id,
        "busy": None,
        "busy_here": busy_here,
        "turn": turn_view(store, chat_id, now_ms),
        "pending": {"count": len(pending), "first": [
            {"message_id": mid, "sender": m.sender_open_id if m else None,
             "text": short(m.text) if m else None, "retry": m.retry if m else 0}
            for mid, m in pending[:first]]},
        "session": {"generation": int(generation or 0),
                    "ttl_s": round(session_ttl_ms / 1000) if session_ttl_ms > 0 else None},
        "history": [{**r.to_dict(), "turn_id": turn_task_id(chat_id, r.message_id,
                                                             int(r.fence or 0)),
                     "reactions": [{"emoji": e, "by": b}
                                   for e, b in reactions.get(r.message_id, [])]}
                    for r in read_history(store.redis, k)],
        "undelivered": store.undelivered(chat_id)[:first],
        "topics": topics_view(store, chat_id, now_ms),
    }
    if view["turn"] is not None:
        view["busy"] = view["turn"]["busy"]
    return view


def topics_view(store: ChatStore, chat_id: str, now_ms: int) -> list[dict[str, Any]] | None:
    """The live topics of a chat's state (order scope `thread`; None otherwise, or for a
    topic's own state): each one's turn (state, message, for how long) and waiting count."""
    if not store.keyspace.scope.per_thread or topic_of(chat_id):
        return None
    return state_rows(store, store.changes.live_topics(chat_id), now_ms)


def state_rows(store: ChatStore, states: list[str], now_ms: int) -> list[dict[str, Any]]:
    """Each state's waiting count and turn (its state, message, task, for how long), in
    one round trip."""
    with store.redis.pipeline(transaction=False) as pipe:
        for state in states:
            k = store.keys(state)
            pipe.zcard(k.inbox)
            pipe.hmget(k.lease, "state", "since_ms", "task_id", "message_id")
        replies = pipe.execute() if states else []
    rows: list[dict[str, Any]] = []
    for i, state in enumerate(states):
        count, (turn, since, task, message_id) = replies[2 * i], replies[2 * i + 1]
        rows.append({"chat_id": state, "pending": int(count),
                     "state": text_of(turn) if turn else "idle",
                     "task_id": text_of(task) if task else None,
                     "message_id": text_of(message_id) if message_id else None,
                     "for_s": round((now_ms - int(since)) / 1000, 1) if since else None})
    return rows


def chats_view(store: ChatStore, *, limit: int, page: int = 1) -> dict[str, Any]:
    """Active chats (a turn or waiting messages), busiest first, `limit` a page."""
    found: list[str] = []
    for index in store.keyspace.indexes:
        found += [text_of(c) for c in store.redis.zrange(index, 0, CHATS_SCAN_MAX - 1)]
    rows = state_rows(store, found, store.server_ms())
    rows.sort(key=lambda r: (-r["pending"], r["chat_id"]))
    start = (max(page, 1) - 1) * limit
    return {"total": len(rows), "page": max(page, 1), "limit": limit,
            "truncated": len(found) >= CHATS_SCAN_MAX * len(store.keyspace.indexes),
            "running": sum(r["state"] == "running" for r in rows),
            "chats": rows[start: start + limit]}


def redis_view(store: ChatStore) -> dict[str, Any]:
    info = store.redis.info()
    started = time.monotonic()
    store.redis.ping()
    return {"version": info.get("redis_version"), "used_memory": info.get("used_memory"),
            "used_memory_human": info.get("used_memory_human"),
            "maxmemory": info.get("maxmemory"), "uptime_s": info.get("uptime_in_seconds"),
            "aof": bool(info.get("aof_enabled")),
            "ping_ms": round((time.monotonic() - started) * 1000, 2)}


def worker_view(stats: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Celery's `inspect stats`, cut down to what an operator looks at."""
    out = []
    for name, s in sorted(stats.items()):
        pool = s.get("pool") or {}
        kind = str(pool.get("implementation", "")).split(":", 1)[0].rsplit(".", 1)[-1]
        out.append({"name": name, "pool": kind or None,
                    "concurrency": pool.get("max-concurrency"),
                    "processes": len(pool.get("processes") or []) or None,
                    "uptime_s": s.get("uptime"),
                    "tasks": sum((s.get("total") or {}).values())})
    return out


def agents_view(reports: dict[str, dict[str, Any]],
                now_s: float | None = None) -> dict[str, dict[str, Any]]:
    """Each worker process's agent figures (`gateway.agents.report.view`), by process id."""
    return {owner: view(f, now_s) for owner, f in sorted(reports.items())}

"""What the order scope `thread` costs against `chat`, in one run on one Redis: the same
messages (groups whose messages go to ten topics each) taken through the chat layer's own
steps (ingest, start, complete: the Lua scripts every listener and worker runs), once with
every topic a state of its own and once with one state per chat, one step at a time as
one listener and one worker slot would; and what each leaves in Redis.

`python -m bench.topics` runs it alone on a private redis-server and prints the JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import redis

from gateway.chats.keys import Keyspace
from gateway.chats.scope import ChatScope
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.model import Message

CHATS = 20
TOPICS = 10
PER_TOPIC = 10


def _messages(tag: str) -> list[Message]:
    """Round robin over the chats and their topics, as users of busy topic groups write."""
    out = []
    for n in range(PER_TOPIC):
        for c in range(CHATS):
            for t in range(TOPICS):
                out.append(Message(f"om_{tag}_{c}_{t}_{n}", f"oc_{tag}_{c:02d}", "group", "ou_x",
                                   "text", "hi", create_time_ms=1_800_000_000_000 + n,
                                   thread_id=f"omt_{c}_{t}"))
    return out


def _run(client: redis.Redis, tag: str, per_thread: bool) -> dict[str, Any]:
    """Admit every message, then run every turn to its end (start, complete and the claims
    of the next), one step at a time; steps per second and Redis bytes per message."""
    store = ChatStore(client, StoreConfig(inbox_cap=1000),
                      Keyspace(scope=ChatScope(per_thread=per_thread)))
    messages = _messages(tag)
    began = time.perf_counter()
    ready = [a.claimed for a in (store.inbox.ingest(m) for m in messages) if a.claimed]
    ingest_s = time.perf_counter() - began
    began, turns = time.perf_counter(), 0
    while ready:
        turn = ready.pop()
        started = store.turns.start(turn, "task", "w")
        assert started is not None
        following = store.turns.complete(turn).following
        turns += 1
        if following is not None:
            ready.append(following)
    run_s = time.perf_counter() - began
    assert turns == len(messages), (turns, len(messages))
    size = 0
    for key in client.scan_iter(match=f"gw:{{oc_{tag}_*", count=1000):
        size += int(client.memory_usage(key, samples=0) or 0)
    return {"messages": len(messages), "ingest_per_s": round(len(messages) / ingest_s),
            "turns_per_s": round(turns / run_s),
            "redis_bytes_per_message": round(size / len(messages))}


def measure(client: redis.Redis, rounds: int = 5) -> dict[str, Any]:
    """Chat scope, then thread scope, `rounds` times in turn on `client`'s Redis (the host's
    noise meets both alike): each figure's median, and the ratios thread / chat."""
    runs: dict[str, list[dict[str, Any]]] = {"chat": [], "thread": []}
    for n in range(rounds):
        runs["chat"].append(_run(client, f"osc{n}", per_thread=False))
        runs["thread"].append(_run(client, f"ost{n}", per_thread=True))
    figures = ("ingest_per_s", "turns_per_s", "redis_bytes_per_message")
    median = {scope: {k: statistics.median(r[k] for r in rs) for k in figures}
              for scope, rs in runs.items()}
    return {**median, "ratio": {k: round(median["thread"][k] / median["chat"][k], 2)
                                for k in figures}}


def main() -> int:
    from gateway.ops.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis().start()
    try:
        print(json.dumps(measure(redis.Redis.from_url(server.url)), indent=1))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

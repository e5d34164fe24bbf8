"""Bytes per message of the dedupe marks, for the layout the gateway uses and the ones it
could: measured with `MEMORY USAGE` on the bench's Redis, with Feishu-shaped ids (`oc_` and
`om_` and 32 hex digits), at a quiet and a busy chat's daily count of messages.

- `the gateway`: a hash per chat and day of the messages' create_time, a field per message
  (its id packed into 17 bytes), written by the real ingest script: `HSETNX` + `EXPIREAT`.
- `key per id` (the layout before): `gw:{chat}:seen:<message_id>` = '1', its own TTL; one
  `SET NX EX` per message.
- `chat hash per day, whole ids`: the gateway's layout with the id as the field.
- `... 8-byte digests`: with the first 8 bytes of a BLAKE2b digest of the id as the field
  (a false duplicate once in 2^64 / ids a chat keeps).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any

import redis

from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.model import Message

TTL_S = 172_800
Layout = Callable[[Any, str, str], None]


def _key_per_id(pipe: Any, chat: str, message_id: str) -> None:
    pipe.set(f"gw:{{{chat}}}:seen:{message_id}", "1", nx=True, ex=TTL_S)


def _hash_per_day(pipe: Any, chat: str, message_id: str) -> None:
    pipe.hsetnx(f"gw:{{{chat}}}:seen:20261205", message_id, "1")
    pipe.expire(f"gw:{{{chat}}}:seen:20261205", TTL_S)


def _digest_hash_per_day(pipe: Any, chat: str, message_id: str) -> None:
    field = hashlib.blake2b(message_id.encode(), digest_size=8).digest()
    pipe.hsetnx(f"gw:{{{chat}}}:seen:20261205", field, "1")
    pipe.expire(f"gw:{{{chat}}}:seen:20261205", TTL_S)


def _gateway(store: ChatStore, now_ms: int) -> Layout:
    def ingest(pipe: Any, chat: str, message_id: str) -> None:
        store.inbox.ingest(Message(message_id, chat, "p2p", "ou_bench", "text", "hi",
                             create_time_ms=now_ms))
    return ingest


LAYOUTS: dict[str, tuple[Layout, float]] = {
    "key per id (the layout before)": (_key_per_id, 1),
    "chat hash per day, whole ids": (_hash_per_day, 2),
    "chat hash per day, 8-byte digests": (_digest_hash_per_day, 2),
}
"""name -> (how a mark is written, commands per message to check and mark)"""


def _bytes_per_message(client: redis.Redis, layout: Layout, chats: int, per_chat: int) -> float:
    tag = uuid.uuid4().hex[:6]
    chat_ids = [f"oc_{tag}{uuid.uuid4().hex[6:]}" for _ in range(chats)]
    pipe = client.pipeline(transaction=False)
    for chat in chat_ids:
        for _ in range(per_chat):
            layout(pipe, chat, f"om_{uuid.uuid4().hex}")
    pipe.execute()
    total = 0
    for chat in chat_ids:
        keys = list(client.scan_iter(match=f"gw:{{{chat}}}:seen:*", count=1000))
        total += sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)
        client.delete(*client.keys(f"gw:{{{chat}}}:*"))
    return total / (chats * per_chat)


def measure(client: redis.Redis, chats: int = 200) -> dict[str, Any]:
    """Bytes per message of each layout, for chats with 1, 10 and 300 messages a day (a
    hash of over 128 fields is no longer packed)."""
    seconds, _ = client.time()
    store = ChatStore(client, StoreConfig(inbox_cap=1000))
    layouts = {"the gateway": (_gateway(store, int(seconds) * 1000), 2), **LAYOUTS}
    return {name: {"commands": commands,
                   "bytes_1_a_day": _bytes_per_message(client, layout, chats, 1),
                   "bytes_10_a_day": _bytes_per_message(client, layout, chats, 10),
                   "bytes_300_a_day": _bytes_per_message(client, layout, chats // 10, 300)}
            for name, (layout, commands) in layouts.items()}

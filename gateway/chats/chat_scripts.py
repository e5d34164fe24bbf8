"""The chat scripts (`lua/`) on one Redis client: the key layout they run on, the limits they
enforce, and how a step runs one, alone or batched. Every step of `ChatStore` builds on it.

A script with many settings takes them packed in one argument (gateway/core/scripts.py): the
store's limits it reads, named as in `StoreConfig` and packed once per store, plus a step's
own options where it has some.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import redis

from gateway.chats.keys import KEYSPACE_KEY, ChatKeys, Keyspace
from gateway.chats.routing import route
from gateway.chats.store_types import StoreConfig, text_of
from gateway.chats.upgrade import Compat, Upgrade
from gateway.core.errors import SettingsError
from gateway.core.scripts import pack, register

P = TypeVar("P", bound="ChatScripts")

LIMITS: dict[str, tuple[str, ...]] = {
    "ingest": ("dedupe_ttl_s", "inbox_cap", "claim_ttl_ms", "queued_ttl_ms", "control_cap",
               "session_ttl_ms", "history_cap", "history_ttl_ms", "late_after_ms",
               "late_events", "active_cap"),
    "start": ("running_ttl_ms", "max_attempts", "session_ttl_ms", "merge_window_ms"),
    "complete": ("claim_ttl_ms", "queued_ttl_ms", "running_ttl_ms", "max_attempts",
                 "session_ttl_ms", "history_cap", "history_ttl_ms"),
    "recover": ("claim_ttl_ms", "running_ttl_ms", "requeue_cap_ms", "queued_ttl_ms",
                "history_cap", "history_ttl_ms", "stop_hold_ms"),
    "retry": ("claim_ttl_ms", "queued_ttl_ms", "inbox_cap", "history_cap", "history_ttl_ms"),
    "cancel": ("claim_ttl_ms", "queued_ttl_ms", "session_ttl_ms", "history_cap",
               "history_ttl_ms", "stop_hold_ms"),
    "withdraw": ("dedupe_ttl_s", "claim_ttl_ms", "queued_ttl_ms", "control_cap", "history_cap",
                 "history_ttl_ms", "flag_ttl_ms", "stop_hold_ms"),
    "evict": ("dedupe_ttl_s", "claim_ttl_ms", "queued_ttl_ms", "control_cap", "history_cap",
              "history_ttl_ms", "flag_ttl_ms", "stop_hold_ms"),
}
"""The store's limits each script with a packed argument reads from it."""

COMPAT: tuple[str, ...] = ("ingest", "start", "complete")
"""The scripts whose packed argument also says what they must be compatible with
(upgrade.py: `legacy_before_ms`, `mixed`)."""


class ChatScripts:
    def __init__(self, client: redis.Redis, config: StoreConfig | None = None,
                 keyspace: Keyspace | None = None, *, runner: str = "") -> None:
        """`client` is a `redis.Redis`, or a `redis.RedisCluster` with a sharded `keyspace`.
        `runner`: this process's id, marked on each turn it starts (`mark_runner`; workers
        whose agents keep a session in memory only)."""
        self.redis = client
        self.config = config or StoreConfig()
        self.runner = runner
        self.keyspace = keyspace or Keyspace()
        self._scripts = register(client, "gateway.chats")
        self._limits = {name: {f: getattr(self.config, f) for f in fields}
                        for name, fields in LIMITS.items()}
        self._packed = {name: pack(limits) for name, limits in self._limits.items()}
        self.upgrade = Upgrade(client)
        self._compat_packed: dict[tuple[str, Compat], str] = {}

    def part(self, kind: type[P]) -> P:
        """A part of the store's steps (gateway/chats/store.py) on this very runner: its
        client, layout, limits and scripts, and what it caches, are every part's."""
        part = kind.__new__(kind)
        part.__dict__ = self.__dict__
        return part

    def keys(self, chat_id: str) -> ChatKeys:
        return self.keyspace.chat(chat_id)

    def options(self, name: str, **own: Any) -> str:
        """Script `name`'s packed argument: the store's limits it reads, and `own` options."""
        if name in COMPAT:  # (reads Redis once per process and then every few minutes)
            compat = self.upgrade.now()
            packed = None if own else self._compat_packed.get((name, compat))
            if packed is None:
                packed = pack({**self._limits[name], **own, "mixed": compat.mixed,
                               "legacy_before_ms": compat.legacy_before_ms})
                if not own:
                    self._compat_packed[(name, compat)] = packed
            return packed
        return pack({**self._limits[name], **own}) if own else self._packed[name]

    def _run(self, name: str, chat_id: str, *args: Any) -> Any:
        return self.run_script(name, chat_id, args)

    def run_script(self, name: str, chat_id: str, args: Sequence[Any],
                   more_keys: Sequence[str] = ()) -> Any:
        """Script `name` on the chat's keys (then `more_keys`), for the state's other
        modules (gateway/chats/admin.py)."""
        return self._scripts[name](keys=[*self.keys(chat_id).all, *more_keys], args=list(args))

    def _batch(self, name: str, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """Run script `name` once per (keys, args) in one round trip (one per master on a
        cluster). A cluster pipeline cannot load a script first: a master that lost it (a
        restart, a failover) answers NOSCRIPT, and that call runs again on its own (it did
        nothing the first time)."""
        script = self._scripts[name]
        with self.redis.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                if self.keyspace.shards:  # redis-py blocks its evalsha() in a cluster pipeline
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args,  # type: ignore[no-untyped-call]
                                         **route(self.redis, keys[0]))
                else:
                    script(keys=keys, args=args, client=pipe)
            replies = pipe.execute(raise_on_error=False)
        out = []
        for (keys, args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):
                reply = script(keys=keys, args=args)
            elif isinstance(reply, Exception):
                raise reply
            out.append(reply)
        return out

    def claim_keyspace(self) -> None:
        """Record the key layout in Redis (`gw:keyspace`: the shard count, 0 for one Redis)
        the first time; refuse a process whose layout differs, since every chat's keys would
        be looked for elsewhere (two leases for one chat, dedupe marks not found). Also
        record when this version first ran here (upgrade.py)."""
        mine = str(self.keyspace.shards)
        self.upgrade.record(fresh=bool(self.redis.set(KEYSPACE_KEY, mine, nx=True)))
        recorded = text_of(self.redis.get(KEYSPACE_KEY) or mine)
        if recorded != mine:
            raise SettingsError(
                f"this Redis keeps the chat state for GATEWAY_STATE_SHARDS={recorded} (0: one "
                f"Redis, not a cluster) but this process has {mine}: use the same layout "
                "everywhere, or drain and move the state first (docs/scaling.md)")

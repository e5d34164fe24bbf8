"""The chat store's layout and limits, from the settings: what every process builds first
beside its Redis client (the CLI's reads need nothing more)."""

from __future__ import annotations

from gateway.chats.keys import Keyspace
from gateway.chats.scope import ChatScope
from gateway.chats.store_types import StoreConfig
from gateway.core.settings import Settings


def keyspace(s: Settings) -> Keyspace:
    """Where each chat's keys live; with several apps (FEISHU_APPS) each app's view of a chat
    has a state of its own, and under the order scope `thread` so has each topic
    (gateway/chats/scope.py)."""
    return Keyspace(s.state_shards if s.redis_cluster else 0,
                    ChatScope(per_app=len(s.apps) > 1, primary_app=s.primary_app_id,
                              per_thread=s.order_scope == "thread"))


def store_config(s: Settings) -> StoreConfig:
    return StoreConfig(
        claim_ttl_ms=s.claim_ttl_ms, queued_ttl_ms=s.queued_ttl_ms, running_ttl_ms=s.lease_ttl_ms,
        requeue_cap_ms=s.requeue_cap_ms, dedupe_ttl_s=s.dedupe_ttl_s, inbox_cap=s.inbox_cap,
        max_attempts=s.max_attempts, durable_ack=s.durable_ack,
        durable_ack_timeout_ms=s.durable_ack_timeout_ms, history_cap=s.history_turns,
        history_ttl_ms=s.retry_retention_s * 1000, late_after_ms=int(s.late_after_s * 1000),
        late_events=s.late_events, merge_window_ms=s.merge_window_ms,
        active_cap=s.catchup_max_chats,
        flag_ttl_ms=max(int(s.cancel_timeout_s * 1000) + 2 * s.lease_ttl_ms, 300_000),
        stop_hold_ms=int(s.cancel_timeout_s * 1000) + s.lease_ttl_ms,
        # the mark (set as a turn starts) outlives any agent that ran it: the longest turn,
        # the idle TTL, a sweep round and a minute
        ran_ttl_ms=int((s.turn_time_limit_s + s.agent_idle_ttl_s
                        + min(60.0, s.agent_idle_ttl_s / 2) + 60) * 1000))

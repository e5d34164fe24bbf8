"""A chat's state with one app and with several (gateway/chats/scope.py): one app keeps
today's key names exactly; with several apps each app's view of a chat has its own state, so
the same message delivered to two bots is admitted once for each, and a redelivery of either
is a duplicate."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis

from gateway.chats.keys import ChatKeys, Keyspace
from gateway.chats.scope import ChatScope, chat_of, split_state, state_id
from gateway.chats.store import ChatStore
from gateway.chats.store_settings import keyspace
from gateway.chats.store_types import text_of
from gateway.core.model import Message
from gateway.core.settings import load_settings
from gateway.ops.embedded_redis import EmbeddedRedis
from tests.support.rig import client_of
from tests.support.store import msg, pending_ids, store_for

TWO_APPS = ChatScope(per_app=True, primary_app="cli_a", per_thread=True)


@pytest.fixture
def redis_client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    """A Redis of this module's own: no listener's desk takes its control jobs."""
    yield from client_of(private_redis)


def test_one_app_keeps_the_chat_keys_exactly() -> None:
    one = Keyspace()
    state = one.scope.of_message(msg("oc_team", 1))
    assert state == "oc_team"
    k = one.chat(state)
    assert (k.lease, k.inbox, k.fence, k.tries, k.stop, k.generation, k.done) == (
        "gw:{oc_team}:lease", "gw:{oc_team}:inbox", "gw:{oc_team}:fence",
        "gw:{oc_team}:tries", "gw:{oc_team}:stop", "gw:{oc_team}:gen", "gw:{oc_team}:done")
    assert (k.seen("om_1"), k.index, k.control) == ("gw:{oc_team}:seen:om_1", "gw:chats",
                                                   "gw:control")
    tagged = dataclasses.replace(msg("oc_team", 1), app_id="cli_other")
    assert one.scope.of_message(tagged) == "oc_team", "one app: the tag changes nothing"
    sharded = Keyspace(16).chat("oc_team")
    assert sharded.lease == f"gw:{{s{zlib.crc32(b'oc_team') % 16}}}:c:oc_team:lease"


def test_with_several_apps_each_app_has_its_own_state_of_the_chat() -> None:
    two = Keyspace(scope=TWO_APPS)
    a = two.scope.of_message(dataclasses.replace(msg("oc_team", 1), app_id="cli_a"))
    b = two.scope.of_message(dataclasses.replace(msg("oc_team", 1), app_id="cli_b"))
    assert (a, b) == ("oc_team@cli_a", "oc_team@cli_b")
    assert two.scope.of_message(msg("oc_team", 1)) == a, "untagged: the primary app's"
    assert two.chat(b).lease == "gw:{oc_team@cli_b}:lease", "one hash tag per (chat, app)"
    assert two.chat(b).seen("om_1") == "gw:{oc_team@cli_b}:seen:om_1"
    shard = zlib.crc32(b"oc_team@cli_b") % 8
    assert Keyspace(8, TWO_APPS).chat(b) == ChatKeys("oc_team@cli_b", shard)
    assert split_state(b) == ("oc_team", "cli_b") and chat_of(b) == "oc_team"
    assert split_state("oc_team") == ("oc_team", "") and state_id("oc_team", "") == "oc_team"
    assert TWO_APPS.candidates("oc_team", ("cli_a", "cli_b")) == [
        "oc_team", "oc_team@cli_a", "oc_team@cli_b"]


def test_the_settings_key_by_app_only_when_several_apps_are_listed() -> None:
    one = keyspace(load_settings(feishu_app_id="cli_a", feishu_app_secret="s",
                                 feishu_apps=""))
    assert one.scope == ChatScope(per_app=False, primary_app="cli_a", per_thread=True)
    two = keyspace(load_settings(feishu_app_id="cli_a", feishu_app_secret="s",
                                 feishu_apps="cli_b:t"))
    assert two.scope == TWO_APPS


def test_one_message_to_two_bots_is_admitted_once_for_each(redis_client: redis.Redis,
                                                         chat_id: str) -> None:
    base = store_for(redis_client)
    store = ChatStore(redis_client, base.config, Keyspace(scope=TWO_APPS))
    to_a, to_b = (dataclasses.replace(msg(chat_id, 1), chat_type="group", app_id=app)
                  for app in ("cli_a", "cli_b"))
    first, second = store.inbox.ingest(to_a), store.inbox.ingest(to_b)
    assert (first.outcome, second.outcome) == ("claimed", "claimed")
    assert first.claimed is not None and second.claimed is not None
    assert (first.claimed.chat_id, second.claimed.chat_id) == (f"{chat_id}@cli_a",
                                                               f"{chat_id}@cli_b")
    assert store.inbox.ingest(to_a).outcome == store.inbox.ingest(to_b).outcome == "duplicate"
    assert pending_ids(store, f"{chat_id}@cli_a") == pending_ids(store,
                                                                 f"{chat_id}@cli_b") == ["om_1"]
    assert not redis_client.exists(f"gw:{{{chat_id}}}:inbox"), "nothing under the chat's key"
    members = {text_of(m) for m in redis_client.zrange("gw:chats", 0, -1)}
    assert {f"{chat_id}@cli_a", f"{chat_id}@cli_b"} <= members


def test_a_command_to_one_bot_names_that_bots_state(redis_client: redis.Redis,
                                                   chat_id: str) -> None:
    store = ChatStore(redis_client, store_for(redis_client).config, Keyspace(scope=TWO_APPS))
    stop = Message("om_stop", chat_id, "group", "ou_u", "text", "/stop", app_id="cli_b")
    assert store.inbox.ingest(stop, "stop").outcome == "command"
    entries = cast(list[tuple[Any, dict[Any, Any]]], redis_client.xrange("gw:control"))
    [(_, fields)] = entries[-1:]
    assert {text_of(k): text_of(v) for k, v in fields.items()}["chat"] == f"{chat_id}@cli_b"

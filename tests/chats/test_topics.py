"""Topics as states of their own (GATEWAY_ORDER_SCOPE=thread, gateway/chats/scope.py): each
thread of a chat queues and runs apart from the chat's other threads, only `thread_id`
makes a topic, a recall or an edit that does not say its topic finds it, a removal of the
bot reaches every topic, and a chat with thousands of topics keeps bounded, expiring keys."""

from __future__ import annotations

import dataclasses
import uuid
import zlib

import redis

from gateway.chats.keys import Keyspace
from gateway.chats.scope import ChatScope, chat_of, split_state, topic_of
from gateway.chats.store import ChatStore
from gateway.chats.store_settings import keyspace
from gateway.chats.store_types import text_of
from gateway.core.model import Message
from gateway.core.settings import load_settings
from tests.support.store import msg, pending_ids, started, store_for

TOPICS = Keyspace(scope=ChatScope(per_thread=True))


def in_topic(chat_id: str, n: int, thread_id: str, **fields: object) -> Message:
    return dataclasses.replace(msg(chat_id, n), chat_type="group", thread_id=thread_id,
                               **fields)  # type: ignore[arg-type]


def topic_store(client: redis.Redis, **overrides: object) -> ChatStore:
    return ChatStore(client, store_for(client, **overrides).config, TOPICS)


def test_a_topic_is_a_state_beside_its_chat_under_its_hash_tag_and_shard() -> None:
    state = TOPICS.scope.of_message(in_topic("oc_team", 1, "omt_a"))
    assert state == "oc_team/omt_a" and topic_of(state) == "omt_a"
    assert chat_of(state) == "oc_team" and split_state(state) == ("oc_team", "")
    k = TOPICS.chat(state)
    assert (k.lease, k.inbox, k.done) == ("gw:{oc_team}/omt_a:lease", "gw:{oc_team}/omt_a:inbox",
                                          "gw:{oc_team}/omt_a:done")
    shared = TOPICS.chat("oc_team")
    assert (k.marks(1, "om_1"), k.left, k.edit("om_1"), k.late_noted) == (
        shared.marks(1, "om_1"), shared.left, shared.edit("om_1"), shared.late_noted), \
        "the marks, edits, `left` and the late note are the chat's, shared by its topics"
    two = ChatScope(per_app=True, primary_app="cli_a", per_thread=True)
    tagged = dataclasses.replace(in_topic("oc_team", 1, "omt_a"), app_id="cli_b")
    assert two.of_message(tagged) == "oc_team@cli_b/omt_a"
    sharded = Keyspace(16, two)
    shard = zlib.crc32(b"oc_team@cli_b") % 16
    assert sharded.chat("oc_team@cli_b/omt_a").shard == sharded.chat("oc_team@cli_b").shard \
        == shard, "a topic lives in its chat's shard: one slot for every script"
    root_only = dataclasses.replace(msg("oc_team", 2), chat_type="group", root_id="om_1")
    assert TOPICS.scope.of_message(root_only) == "oc_team", "a root_id alone is no topic"
    assert ChatScope().of_message(in_topic("oc_team", 1, "omt_a")) == "oc_team", \
        "order scope chat: the chat's one state"


def test_the_settings_make_topics_states_by_default() -> None:
    assert keyspace(load_settings(_env_file=None)).scope.per_thread
    assert not keyspace(load_settings(_env_file=None, gateway_order_scope="chat")).scope \
        .per_thread


def test_topics_of_one_chat_each_get_a_turn_of_their_own(redis_client: redis.Redis,
                                                         chat_id: str) -> None:
    store = topic_store(redis_client)
    a1, b1, own = (store.inbox.ingest(in_topic(chat_id, 1, "omt_a")),
                   store.inbox.ingest(in_topic(chat_id, 2, "omt_b")),
                   store.inbox.ingest(dataclasses.replace(msg(chat_id, 3), chat_type="group")))
    assert [x.outcome for x in (a1, b1, own)] == ["claimed"] * 3, "three queues, all idle"
    assert [x.claimed.chat_id for x in (a1, b1, own) if x.claimed] == [
        f"{chat_id}/omt_a", f"{chat_id}/omt_b", chat_id]
    a2 = store.inbox.ingest(in_topic(chat_id, 4, "omt_a"))
    assert a2.outcome == "queued", "a topic's next message waits behind its own turn"
    assert store.inbox.ingest(in_topic(chat_id, 1, "omt_a")).outcome == "duplicate"
    assert pending_ids(store, f"{chat_id}/omt_a") == ["om_1", "om_4"]
    assert pending_ids(store, f"{chat_id}/omt_b") == ["om_2"]
    assert pending_ids(store, chat_id) == ["om_3"]
    assert a1.claimed is not None
    started(store, a1.claimed)
    following = store.turns.complete(a1.claimed).following
    assert following is not None and following.message_id == "om_4"
    assert following.chat_id == f"{chat_id}/omt_a"
    assert store.changes.live_topics(chat_id) == [f"{chat_id}/omt_a", f"{chat_id}/omt_b"]
    assert store.changes.live_topics(f"{chat_id}/omt_a") == [], "a topic has no topics"


def test_a_recall_or_an_edit_that_does_not_say_its_topic_finds_it(redis_client: redis.Redis,
                                                                  chat_id: str) -> None:
    store = topic_store(redis_client)
    store.inbox.ingest(in_topic(chat_id, 1, "omt_a"))  # (its turn holds the topic)
    store.inbox.ingest(in_topic(chat_id, 2, "omt_a"))
    store.inbox.ingest(in_topic(chat_id, 3, "omt_a"))
    recalled = store.changes.withdraw(chat_id, "om_3")  # (a recall names the chat only)
    assert recalled.how in ("dropped", "idle")
    assert pending_ids(store, f"{chat_id}/omt_a") == ["om_1", "om_2"]
    edited = dataclasses.replace(msg(chat_id, 2, text="new"),
                                 chat_type="group")  # (no thread_id said)
    assert store.changes.revise(edited, 1_700_000_001_000) == "revised"
    [(_, waiting)] = [p for p in store.pending(f"{chat_id}/omt_a") if p[0] == "om_2"]
    assert waiting is not None and waiting.text == "new"
    assert waiting.thread_id == "omt_a", "the edit keeps the message in its topic"
    # a recall that comes first: the message is never admitted, whichever topic it says
    assert store.changes.withdraw(chat_id, "om_9").how == "unknown"
    assert store.inbox.ingest(in_topic(chat_id, 9, "omt_b")).outcome == "withdrawn"


def test_a_removal_of_the_bot_reaches_every_topic(redis_client: redis.Redis,
                                                 chat_id: str) -> None:
    store = topic_store(redis_client)
    for n, thread in enumerate(("omt_a", "omt_a", "omt_b", ""), 1):
        store.inbox.ingest(in_topic(chat_id, n, thread))
    changes = store.changes.evict_all(chat_id, 0)
    assert len(changes) == 3, "the chat's own state and its two topics"
    assert sum(c.dropped for c in changes) == 4
    for state in (chat_id, f"{chat_id}/omt_a", f"{chat_id}/omt_b"):
        assert pending_ids(store, state) == []
    assert store.inbox.ingest(in_topic(chat_id, 5, "omt_c", create_time_ms=1)).outcome == "left", \
        "the chat's `left` mark holds in every topic"


def test_thousands_of_topics_keep_bounded_expiring_keys(redis_client: redis.Redis) -> None:
    """Every topic's turn run and finished, with ids as long as Feishu's: a finished topic
    keeps no more than a finished chat (dedupe marks and history apart) plus its thread id
    in its key's name, every key expires, and nothing of the chat grows with its topics but
    the marks of their messages."""
    store = topic_store(redis_client, inbox_cap=100)
    chat_id, topics = f"oc_{uuid.uuid4().hex}", 2000
    alone = f"oc_{uuid.uuid4().hex}"  # (a chat without topics, for the reference)
    for message, n in [(in_topic(chat_id, n, f"omt_{n:012x}"), n) for n in range(topics)] + [
            (dataclasses.replace(msg(alone, 1), chat_type="group"), -1)]:
        admitted = store.inbox.ingest(message)
        assert admitted.claimed is not None, n
        started(store, admitted.claimed)
        assert store.turns.complete(admitted.claimed).outcome == "idle"
    assert store.changes.live_topics(chat_id) == []

    def state_bytes(chat: str) -> int:
        size = 0
        for key in redis_client.scan_iter(match=f"gw:{{{chat}}}*", count=1000):
            name = text_of(key)
            assert redis_client.ttl(key) > 0, f"{name} never expires"
            if ":seen:" not in name and not name.endswith(":done"):
                size += int(redis_client.memory_usage(key, samples=0) or 0)
        return size

    finished_chat = state_bytes(alone)
    per_topic = state_bytes(chat_id) / topics
    assert per_topic <= finished_chat + 24, (per_topic, finished_chat)

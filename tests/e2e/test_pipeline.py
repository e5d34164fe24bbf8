"""The core pipeline end to end: real SDK ↔ simulator, listener and Celery workers as
subprocesses, a real redis-server. Each test uses its own chat ids."""

from __future__ import annotations

import os
import re
import signal
import time

import redis

from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.model import Message
from gateway.feishu.inbound.events import TRUNCATION_MARK
from gateway.listener.desk import full_inbox_notice
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from gateway.worker.sending import FAILURE_REPLY, gave_up_reply
from tests.support.replies import agent_events, replies_to
from tests.support.rig import TEST_LEASE_TTL_S, Front, Spawn


def test_echo_end_to_end(front: Front, chat_id: str) -> None:
    feishu = front.sim
    message_id = feishu.send_text(chat_id, "hello there")
    [reply] = feishu.wait_for_messages(1, chat_id=chat_id, timeout_s=20)
    assert reply.text == "echo: hello there"
    assert reply.reply_to == message_id and reply.uuid
    assert [a.code for a in feishu.acks if a.message_id == message_id] == [200]


def test_group_mention_of_the_bot_is_stripped_and_threads_are_kept(
        feishu: Simulator, listener: GatewayProcess, chat_id: str) -> None:
    mention = feishu.mention_bot()
    message_id = feishu.send_text(chat_id, f"{mention['key']} hello bot", chat_type="group",
                                  mentions=[mention])
    threaded = feishu.send_text(chat_id, "in a topic", chat_type="group",
                                thread_id="omt_topic_1", root_id="om_root_1")
    wait_until(lambda: threaded in replies_to(feishu, chat_id), 20, "both replies")
    sent = {m.reply_to: m for m in feishu.sent_messages(chat_id)}
    assert sent[message_id].text == "echo: hello bot" and not sent[message_id].in_thread
    assert sent[threaded].text == "echo: in a topic" and sent[threaded].in_thread


def test_burst_keeps_per_chat_order_without_overlap_and_answers_once(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        pool: str) -> None:
    chats = [f"oc_burst_{os.getpid()}_{time.monotonic_ns()}_{i}" for i in range(10)]
    sent: dict[str, list[str]] = {chat: [] for chat in chats}
    for n in range(20):
        for chat in chats:
            sent[chat].append(feishu.send_text(chat, f"m{n}"))
    for chat in chats:
        feishu.wait_for_messages(20, chat_id=chat, timeout_s=90)
    runners: set[tuple[int, int]] = set()
    for chat in chats:
        replies = replies_to(feishu, chat)
        assert sorted(replies) == sorted(sent[chat])
        assert all(len(texts) == 1 for texts in replies.values()), "answered twice"
        events = agent_events(redis_client, chat)
        starts = [e["message_id"] for e in events if e["event"] == "start"]
        assert starts == sent[chat], "turns started out of send order"
        kinds = [e["event"] for e in events]
        assert kinds == ["start", "end"] * 20, "turns of one chat overlapped"
        runners.update((e["pid"], e["thread"]) for e in events)
    assert len(runners) >= 2, f"the burst should have used both {pool} pool slots"


def test_redelivered_event_is_answered_once(front: Front, chat_id: str) -> None:
    """Feishu pushes an event again (a new frame; in webhook mode a new POST, to any
    replica): it is answered once."""
    feishu = front.sim
    message_id = feishu.send_text(chat_id, "only once")
    feishu.wait_for_messages(1, chat_id=chat_id, timeout_s=20)
    feishu.redeliver(message_id)
    if front.mode == "ws":
        feishu.drop_connections()
        feishu.wait_connected(1, timeout_s=30)
    feishu.redeliver(message_id)
    marker = feishu.send_text(chat_id, "after the redeliveries")
    wait_until(lambda: marker in replies_to(feishu, chat_id), 20, "the marker's reply")
    assert replies_to(feishu, chat_id)[message_id] == ["echo: only once"]


def test_two_listeners_share_the_app_and_every_message_is_answered_once(
        feishu: Simulator, listener: GatewayProcess, spawn: Spawn, redis_client: redis.Redis,
        chat_id: str) -> None:
    second = spawn("listener", GATEWAY_LOG_LEVEL="DEBUG")  # per-message lines
    feishu.wait_connected(2, timeout_s=30)
    try:
        sent = [feishu.send_text(chat_id, f"n{n}") for n in range(20)]
        for message_id in sent:  # Feishu hands each one to one connection, maybe both
            feishu.redeliver(message_id)
        wait_until(lambda: set(sent) <= set(replies_to(feishu, chat_id)), 30, "every reply")
        replies = replies_to(feishu, chat_id)
        assert [replies[m] for m in sent] == [[f"echo: n{n}"] for n in range(20)]
        events = agent_events(redis_client, chat_id)
        assert sorted(e["message_id"] for e in events if e["event"] == "start") == sorted(sent)
        assert [e["event"] for e in events] == ["start", "end"] * 20, "turns overlapped"
        assert f"of chat {chat_id}: claimed" in second.log() or (
            f"of chat {chat_id}: queued" in second.log()), "the second listener took part"
    finally:
        second.stop()
        wait_until(lambda: feishu.connection_count == 1, 10, "one listener again")


def test_a_refused_reconnect_is_retried_until_it_succeeds(
        feishu: Simulator, listener: GatewayProcess, spawn: Spawn, chat_id: str) -> None:
    """A final code on a reconnect (not at start-up) is retried with backoff, forever: the
    listener never ends up online but deaf, as lark-oapi's client did."""
    feishu.refuse_endpoint(1000040350)  # "too many connections": final for the SDK
    try:
        feishu.drop_connections()
        wait_until(lambda: spawn.logs("listener").count("code 1000040350") >= 2, 20,
                   "the listener to retry the refused endpoint")
        assert feishu.connection_count == 0
    finally:
        feishu.refuse_endpoint(None)
    feishu.wait_connected(1, timeout_s=30)
    message_id = feishu.send_text(chat_id, "can you hear me")
    wait_until(lambda: message_id in replies_to(feishu, chat_id), 20, "the reply")
    assert replies_to(feishu, chat_id)[message_id] == ["echo: can you hear me"]
    assert "connected" in spawn.logs("listener").rsplit("code 1000040350", 1)[1]


def test_worker_killed_mid_turn_is_answered_once_after_the_lease_expires(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    message_id = feishu.send_text(chat_id, "sleep 2 then answer")
    follow_up = feishu.send_text(chat_id, "next in line")
    started = wait_until(lambda: agent_events(redis_client, chat_id), 20, "the turn to start")
    assert isinstance(started, list)
    os.kill(started[0]["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: follow_up in replies_to(feishu, chat_id), TEST_LEASE_TTL_S + 15,
               "the follow-up after recovery")
    assert time.monotonic() - killed_at < TEST_LEASE_TTL_S + 2 + 8
    replies = replies_to(feishu, chat_id)
    assert replies[message_id] == ["echo: sleep 2 then answer"]
    assert replies[follow_up] == ["echo: next in line"]


def test_a_message_admitted_but_never_published_is_answered(
        feishu: Simulator, worker: GatewayProcess, redis_server: EmbeddedRedis,
        chat_id: str) -> None:
    """The listener died between its Redis step and the publish: the sweeper heals it."""
    message_id = feishu.send_text(chat_id, "published by nobody", deliver=False)
    client = redis.Redis.from_url(redis_server.url)
    store = ChatStore(client, StoreConfig(claim_ttl_ms=3000, running_ttl_ms=3000, inbox_cap=50))
    admission = store.inbox.ingest(Message(message_id, chat_id, "p2p", "ou_user_1", "text",
                                     "published by nobody"))
    client.close()
    assert admission.outcome == "claimed"  # ... and no publish follows
    wait_until(lambda: message_id in replies_to(feishu, chat_id), 3 + 10, "the healed turn")
    assert replies_to(feishu, chat_id)[message_id] == ["echo: published by nobody"]


def test_a_message_that_kills_its_worker_every_time_is_given_up_and_the_chat_goes_on(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    poison = feishu.send_text(chat_id, "crash")
    after = feishu.send_text(chat_id, "still alive?")
    # with the threads pool, each crash takes the whole worker down: it is restarted
    wait_until(lambda: after in replies_to(feishu, chat_id), 4 * (TEST_LEASE_TTL_S + 8),
               "the chat to get past the poison message")
    replies = replies_to(feishu, chat_id)
    assert replies[poison] == [gave_up_reply(3)]
    assert replies[after] == ["echo: still alive?"]
    starts = [e["message_id"] for e in agent_events(redis_client, chat_id)
              if e["event"] == "start"]
    assert starts == [poison, poison, poison, after]


def test_agent_failure_gets_an_honest_reply_and_the_chat_moves_on(
        feishu: Simulator, listener: GatewayProcess, chat_id: str) -> None:
    failing = feishu.send_text(chat_id, "boom please")
    after = feishu.send_text(chat_id, "still here?")
    wait_until(lambda: after in replies_to(feishu, chat_id), 20, "the reply after a failure")
    replies = replies_to(feishu, chat_id)
    assert replies[failing] == [FAILURE_REPLY]
    assert replies[after] == ["echo: still here?"]


def test_full_inbox_tells_the_user_the_message_was_not_queued(
        feishu: Simulator, listener: GatewayProcess, chat_id: str) -> None:
    running = feishu.send_text(chat_id, "sleep 2")
    queued = [feishu.send_text(chat_id, f"q{n}") for n in range(49)]  # cap 50 with the head
    rejected = feishu.send_text(chat_id, "one too many")
    wait_until(lambda: rejected in replies_to(feishu, chat_id), 20, "the not-queued notice")
    assert replies_to(feishu, chat_id)[rejected] == [full_inbox_notice(50)]
    assert running not in replies_to(feishu, chat_id), "the notice came before the head ended"
    wait_until(lambda: queued[-1] in replies_to(feishu, chat_id), 60, "the queue to drain")
    replies = replies_to(feishu, chat_id)
    assert [replies[m] for m in queued] == [[f"echo: q{n}"] for n in range(49)]
    assert replies[running] == ["echo: sleep 2"]


def test_bad_input_is_acked_logged_and_loses_nothing(
        feishu: Simulator, listener: GatewayProcess, spawn: Spawn, chat_id: str) -> None:
    good_before = feishu.send_text(chat_id, "before")
    acks_before = len(feishu.acks)
    feishu.send_message(chat_id, message_type="text", content="{not json")
    hologram = feishu.send_message(chat_id, message_type="hologram", content={"x": 1})
    feishu.send_text(chat_id, "   ")
    feishu.send_event({"schema": "2.0", "header": {"event_id": "ev_bad",
                       "event_type": "im.message.receive_v1"}, "event": {"message": {}}})
    feishu.send_event(b"\x00 not json at all")
    feishu.send_event({"schema": "2.0", "header": {"event_id": "ev_other",
                       "event_type": "im.chat.updated_v1"}, "event": {}})  # not subscribed
    long_id = feishu.send_text(chat_id, "y" * 100_000)
    good_after = feishu.send_text(chat_id, "after")
    acks = feishu.wait_for_acks(acks_before + 8, timeout_s=20)[acks_before:]
    # (the ACK of `good_before` may land among them: it is sent, not yet ACKed, above)
    assert len(acks) >= 8 and {ack.code for ack in acks} == {200}, \
        "nothing Feishu would redeliver forever"
    wait_until(lambda: good_after in replies_to(feishu, chat_id), 20, "the reply after bad input")
    replies = replies_to(feishu, chat_id)
    assert set(replies) == {good_before, hologram, long_id, good_after}
    assert replies[hologram] == ["echo: [hologram message]"], "an unknown type is readable"
    chunks = replies[long_id]  # 16,000 characters echoed back in 4,000-character messages
    assert len(chunks) == 5 and all(len(c) <= 4000 for c in chunks)
    assert [c.rsplit("\n", 1)[1] for c in chunks] == [f"({n}/5)" for n in range(1, 6)]
    assert "".join(re.sub(r"\n\n\(\d/5\)$", "", c) for c in chunks) == \
        "echo: " + "y" * 16_000 + TRUNCATION_MARK
    log = spawn.logs("listener")
    assert "dropped: message content is not JSON" in log
    assert "dropped: message with empty text" in log
    assert "event frame dropped: not JSON" in log
    assert "im.chat.updated_v1" not in log, "an event not handled is one DEBUG line (counted)"


# Last in this file: it replaces the session's listener with a new one.
def test_redelivery_after_a_listener_restart_is_answered_once(
        feishu: Simulator, spawn: Spawn, worker: GatewayProcess, listener: GatewayProcess,
        chat_id: str) -> None:
    listener.stop()
    first = spawn("listener")
    feishu.wait_connected(1, timeout_s=30)
    message_id = feishu.send_text(chat_id, "before restart")
    feishu.wait_for_messages(1, chat_id=chat_id, timeout_s=20)
    closes_before = len(feishu.close_codes)
    clock = time.monotonic()
    assert first.stop() == 0, "SIGTERM must stop the listener cleanly"
    assert time.monotonic() - clock < 10
    assert "listener stopped" in first.log()
    wait_until(lambda: len(feishu.close_codes) > closes_before, 5, "the connection to end")
    assert feishu.close_codes[closes_before:] == [1000], "the websocket ends with a close frame"
    second = spawn("listener")
    feishu.wait_connected(1, timeout_s=30)
    feishu.redeliver(message_id)
    marker = feishu.send_text(chat_id, "after restart")
    wait_until(lambda: marker in replies_to(feishu, chat_id), 20, "the marker's reply")
    assert replies_to(feishu, chat_id)[message_id] == ["echo: before restart"]
    second.stop()
    spawn("listener")  # leave one running for the rest of the session
    feishu.wait_connected(1, timeout_s=30)


def test_listen_with_wrong_credentials_exits_with_one_clear_line(
        feishu: Simulator, gateway_env: dict[str, str], tmp_path: object) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "gateway.ops.cli", "listen"], cwd=str(tmp_path),
        env={**gateway_env, "PATH": "/usr/bin:/bin", "FEISHU_APP_SECRET": "wrong-secret"},
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("feishu-gateway: feishu refused the app credentials:")
    assert "wrong-secret" not in result.stderr + result.stdout

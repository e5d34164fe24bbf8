"""The listener's step on a real Redis: late messages (noted once, or dropped), frames that
are not messages (greetings, events of other types), and the app a message came to."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping

import pytest
import redis

from gateway.broker.publisher import Publisher
from gateway.chats.inbox import Entry
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.errors import RetryableError, TakeLater
from gateway.core.model import GREETING, Message
from gateway.core.redis_client import redis_client
from gateway.core.rules import Rules
from gateway.feishu.outbound.stream_card import STOP_ACTION
from gateway.listener.batch import RedisUnavailable
from gateway.listener.chat_changes import Welcomes
from gateway.listener.intake import Intake
from gateway.listener.outbox import Outbox
from gateway.listener.stop_button import StopButton
from gateway.ops.processes import wait_until
from gateway.simulator.chat_events import member_event, p2p_entered_event
from gateway.simulator.payloads import IncomingMessage, message_receive_event


def redis_now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def event(client: redis.Redis, chat: str, age_ms: int, text: str = "hi") -> dict[str, object]:
    """A message event created `age_ms` before now on Redis's clock."""
    return message_receive_event(IncomingMessage(
        f"om_{uuid.uuid4().hex[:10]}", chat, "p2p", "text", json.dumps({"text": text}),
        "ou_user", redis_now_ms(client) - age_ms), app_id="cli_a")


def intake(client: redis.Redis, late_events: str) -> tuple[Intake, ChatStore]:
    store = ChatStore(client, StoreConfig(late_after_ms=60_000,
                                          late_events=late_events))  # type: ignore[arg-type]
    published: list[object] = []

    class Sender:  # publishing is not what these tests look at: record what would go out
        def send_task(self, *args: object, **kwargs: object) -> object:
            published.append(args)
            raise RuntimeError("not publishing in this test")

    take = Intake(store, Publisher(Sender()), Outbox(), max_text_chars=100,  # type: ignore[arg-type]
                  primary_app_id="cli_a")
    return take, store


def control_kinds(client: redis.Redis, chat: str) -> list[str]:
    entries: list[tuple[str, dict[str, str]]] = client.xrange("gw:control")  # type: ignore[assignment]
    return [fields.get("kind", "") for _, fields in entries if fields.get("chat") == chat]


def test_the_late_messages_of_an_outage_get_one_notice_per_chat(client: redis.Redis) -> None:
    """Hundreds of messages read back after a long outage are each late: the chat is told
    once (the first one's reply says it for the rest), not once a message through the chat's
    send quota; another chat is told of its own."""
    take, store = intake(client, "note")
    chat, other = f"oc_{uuid.uuid4().hex[:8]}", f"oc_{uuid.uuid4().hex[:8]}"
    outcomes = [take.receive(event(client, chat, 3_600_000 - n), caught_up=True)
                for n in range(30)]
    assert outcomes == ["late"] * 30
    assert take.receive(event(client, other, 90_000), caught_up=True) == "late"
    assert control_kinds(client, chat).count("late") == 1
    assert control_kinds(client, other).count("late") == 1
    assert store.pending(chat) == []


def test_a_late_message_is_noted_once_and_never_queued(client: redis.Redis) -> None:
    take, store = intake(client, "note")
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    late = event(client, chat, 61_000)
    assert take.receive(late) == "late"
    assert take.receive(late) == "duplicate", "a redelivery is not told twice"
    assert control_kinds(client, chat).count("late") == 1
    assert store.pending(chat) == []
    assert take.receive(event(client, chat, 55_000)) == "claimed"


def test_a_late_message_may_be_dropped_instead(client: redis.Redis) -> None:
    take, store = intake(client, "drop")
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    assert take.receive(event(client, chat, 3_600_000)) == "late"
    assert "late" not in control_kinds(client, chat) and store.pending(chat) == []


def test_frames_that_are_not_messages_are_acked_and_messages_keep_their_app(
        client: redis.Redis) -> None:
    take, store = intake(client, "note")
    assert take.on_frame("cli_a", "event", b"\xff not json") is None
    assert take.on_frame("cli_a", "event", b'{"header": {}}') is None
    assert take.on_frame("cli_a", "event", json.dumps(
        {"header": {"event_type": "card.action.trigger"}, "event": {}}).encode()) is None
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    assert take.on_frame("cli_b", "event", json.dumps(event(client, chat, 0)).encode()) is None
    [(_, stored)] = store.pending(chat)
    assert stored is not None and stored.app_id == "cli_b"
    other = f"oc_{uuid.uuid4().hex[:8]}"
    take.on_frame("cli_a", "event", json.dumps(event(client, other, 0)).encode())
    [(_, first)] = store.pending(other)
    assert first is not None and first.app_id == "", "the first app's messages stay as before"


def test_a_full_outbox_refuses_events_without_recording_them(client: redis.Redis) -> None:
    """The broker hangs: past the outbox's cap an event is not taken (its frame fails and
    Feishu delivers it again), and nothing of it is recorded, so the redelivery runs."""
    store = ChatStore(client)
    publishing, broker_back = threading.Event(), threading.Event()

    class HangingBroker:
        def send_task(self, *args: object, **kwargs: object) -> object:
            publishing.set()
            broker_back.wait(10)
            raise RuntimeError("the broker is down")

    outbox = Outbox(cap=2).start()
    take = Intake(store, Publisher(HangingBroker()), outbox,  # type: ignore[arg-type]
                  max_text_chars=100, primary_app_id="cli_a")
    chats = [f"oc_{uuid.uuid4().hex[:8]}" for _ in range(4)]
    assert take.receive(event(client, chats[0], 0)) == "claimed"
    publishing.wait(10)  # its publish hangs on the broker
    for chat in chats[1:3]:  # two more wait behind it: the outbox is full
        assert take.receive(event(client, chat, 0)) == "claimed"
    refused = event(client, chats[3], 0)
    with pytest.raises(RetryableError, match="outbox is full"):
        take.on_frame("cli_a", "event", json.dumps(refused).encode())
    assert store.pending(chats[3]) == []
    broker_back.set()
    wait_until(lambda: not outbox.full(), 10, "the outbox to drain")
    assert take.receive(refused) == "claimed", "the redelivery is taken"
    outbox.stop()


def frame(payload: Mapping[str, object]) -> bytes:
    return json.dumps(payload).encode()


def test_greetings_once_only_when_set_and_only_where_someone_may_talk(
        client: redis.Redis) -> None:
    quiet, store = intake(client, "note")
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    added = member_event("im.chat.member.bot.added_v1", chat, app_id="cli_a",
                         operator_open_id="ou_user")
    assert quiet.on_frame("cli_a", "event", frame(added)) is None
    assert store.pending(chat) == [], "no welcome set: nothing to send"
    welcoming = Intake(store, quiet._publisher, Outbox(), max_text_chars=100,
                       primary_app_id="cli_a", welcomes=Welcomes(group="Hello, team"))
    welcoming.on_frame("cli_a", "event", frame(added))
    welcoming.on_frame("cli_a", "event", frame(added))  # redelivered: the same event id
    [(greeting_id, greeting)] = store.pending(chat)
    assert greeting is not None and greeting_id == added["header"]["event_id"]
    assert (greeting.message_type, greeting.text, greeting.chat_type) == (
        GREETING, "Hello, team", "group")
    closed = Intake(store, quiet._publisher, Outbox(), max_text_chars=100, primary_app_id="cli_a",
                    welcomes=Welcomes(group="Hello", dm="Hi"),
                    rules=Rules(group_policy="disabled", dm_policy="allowlist",
                                allowed=frozenset({"ou_friend"})))
    shut = f"oc_{uuid.uuid4().hex[:8]}"
    closed.on_frame("cli_a", "event", frame(member_event(
        "im.chat.member.bot.added_v1", shut, app_id="cli_a", operator_open_id="ou_user")))
    for user in ("ou_stranger", "ou_friend"):
        closed.on_frame("cli_a", "event", frame(p2p_entered_event(
            f"oc_p2p_{user}", app_id="cli_a", operator_open_id=user)))
    assert store.pending(shut) == [] and store.pending("oc_p2p_ou_stranger") == [], \
        "no greeting where the bot answers nobody"
    [(_, hello)] = store.pending("oc_p2p_ou_friend")
    assert hello is not None and (hello.text, hello.chat_type) == ("Hi", "p2p")


def test_events_of_other_types_are_acked_and_counted_by_type(client: redis.Redis) -> None:
    take, store = intake(client, "note")
    unknown = {"schema": "2.0", "header": {"event_id": "ev_1", "event_type": "im.chat.updated_v1"},
               "event": {"chat_id": "oc_x"}}
    assert take.on_frame("cli_a", "event", frame(unknown)) is None
    recall_without_chat = {"schema": "2.0", "header": {
        "event_id": "ev_2", "event_type": "im.message.recalled_v1"}, "event": {}}
    assert take.on_frame("cli_a", "event", frame(recall_without_chat)) is None
    assert take.changes.handle("im.message.recalled_v1", recall_without_chat, "cli_a") == \
        "malformed"


def test_frames_that_arrived_together_are_taken_in_one_round_trip_in_order(
        client: redis.Redis) -> None:
    """Group commit: the message events of a batch go in one pipelined step; a duplicate,
    another event type and a malformed frame in between each get their own answer, and a
    chat's messages queue in the order they came."""
    take, store = intake(client, "note")
    chat, other = f"oc_{uuid.uuid4().hex[:8]}", f"oc_{uuid.uuid4().hex[:8]}"
    first, second, third = (event(client, chat, 0, f"m{n}") for n in range(3))
    elsewhere = event(client, other, 0)
    frames = [("event", json.dumps(e).encode()) for e in (first, second, elsewhere)]
    frames += [("event", b"\xff not json"), ("event", json.dumps(first).encode()),
               ("event", json.dumps(third).encode())]
    answers = take.on_frames("cli_a", frames)
    assert answers == [None] * len(frames), "every frame taken (the duplicate counts once)"
    texts = [m.text for _, m in store.pending(chat) if m is not None]
    assert texts == ["m0", "m1", "m2"], "in the order they came, the duplicate once"
    assert [m for _, m in store.pending(other) if m is not None]


def test_after_a_redis_restart_a_batch_past_its_deadline_loads_no_script_for_the_rest(
        client: redis.Redis) -> None:
    """Redis lost its scripts (a restart): each message of a batch is answered NOSCRIPT and
    the script is loaded again, one message at a time; past the batch's deadline none more
    is begun (each would be a round trip more, past Feishu's 3 s): each gets an error (to
    take later), none is taken."""
    store = ChatStore(client, StoreConfig())
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    now_ms = redis_now_ms(client)
    entries = [Entry(Message(f"om_{uuid.uuid4().hex[:10]}", chat, "p2p", "ou_user", "text",
                             f"m{n}", now_ms + n)) for n in range(3)]
    client.script_flush()
    answers = store.inbox.ingest_many(entries, deadline=time.monotonic())
    assert all(isinstance(a, redis.TimeoutError) for a in answers), answers
    assert store.pending(chat) == [], "none taken"


def test_a_batch_meeting_a_redis_failure_answers_each_message_500(client: redis.Redis,
                                                                  ) -> None:
    port = client.connection_pool.connection_kwargs["port"]
    hasty = redis_client(f"redis://127.0.0.1:{port}", 0.2, retries=0)  # as a listener's
    take, _ = intake(hasty, "note")
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    frames = [("event", json.dumps(event(client, chat, 0, f"m{n}")).encode())
              for n in range(3)]
    client.client_pause(1000)  # the step times out: Feishu is to deliver each again
    answers = take.on_frames("cli_a", frames)
    assert all(isinstance(a, RetryableError) for a in answers), answers
    hasty.close()


def test_once_redis_failed_in_a_batch_the_rest_are_refused_without_waiting(
        client: redis.Redis) -> None:
    """Each frame would otherwise wait out its own timeout: the batch ends at the first
    failure, every frame answered 500 (to be taken later), nothing recorded."""
    port = client.connection_pool.connection_kwargs["port"]
    hasty = redis_client(f"redis://127.0.0.1:{port}", 0.2, retries=0)
    take, _ = intake(hasty, "note")
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    withdrawn = {"schema": "2.0", "header": {"event_id": uuid.uuid4().hex,
                 "event_type": "im.message.recalled_v1", "app_id": "cli_a"},
                 "event": {"message_id": "om_gone", "chat_id": chat}}
    frames = [("event", json.dumps(withdrawn).encode()) for _ in range(5)]
    frames.append(("event", json.dumps(event(client, chat, 0)).encode()))
    client.client_pause(1500)
    clock = time.monotonic()
    answers = take.on_frames("cli_a", frames)
    took_s = time.monotonic() - clock
    assert [type(a) for a in answers] == [RedisUnavailable] + [TakeLater] * 5, answers
    assert took_s < 1.0, f"one timeout, not one a frame ({took_s:.1f} s)"
    assert ChatStore(client).pending(chat) == [], "nothing recorded (read once Redis is back)"
    hasty.close()


def test_a_forged_stop_click_is_refused_on_one_printable_line(
        client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    button = StopButton(ChatStore(client, StoreConfig()))
    forged = {"header": {"event_id": "ev_1"}, "event": {
        "operator": {"open_id": "ou_\udfff"}, "token": "t\ud800",
        "action": {"value": {"action": STOP_ACTION, "chat": "oc_a\nINFO forged",
                             "turn": "turn:\u202e", "requester": "ou_req",
                             "chat_type": "group"}},
        "context": {"open_chat_id": "oc_a\nINFO forged"}}}
    with caplog.at_level(logging.INFO, logger="gateway"):
        answer = button.on_click("cli_a", forged)
    assert answer is not None and answer["toast"]["type"] == "error"
    [line] = [r.getMessage() for r in caplog.records if r.name.startswith("gateway")]
    assert line.isprintable() and "\\n" in line, line

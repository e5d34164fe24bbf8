"""The events a listener refused, taken later on a real Redis: a message refused when Redis
failed, or while the bot's identity was unknown, is taken by the next step first, before
the later messages of its chat (which wait behind it, refused and kept too), while other
chats go on; Feishu's delivery of it again is a duplicate; a card click is never kept."""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid

import pytest
import redis

from gateway.broker.publisher import Publisher
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.errors import TakeLater
from gateway.core.ingest_settings import IngestSettings
from gateway.core.redis_client import redis_client
from gateway.core.rules import Rules
from gateway.listener.intake import UNBOUNDED, Intake
from gateway.listener.outbox import Outbox
from gateway.listener.refused import Refused
from gateway.simulator.payloads import IncomingMessage, message_receive_event

BOT = "ou_bot"
CREATED = itertools.count(int(time.time() * 1000))
"""Each message is created a millisecond after the one before."""


class Sender:  # publishing is not what these tests look at
    def send_task(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("not publishing in this test")


def kept(cap: int, *, at_once: int = 64) -> IngestSettings:
    """An intake's steps that keep `cap` refused events, taking `at_once` in a step."""
    return UNBOUNDED.model_copy(update={"ingest_later_cap": cap, "ingest_group_max": at_once})


def intake(client: redis.Redis, **rules: object) -> tuple[Intake, ChatStore]:
    store = ChatStore(client, StoreConfig())
    take = Intake(store, Publisher(Sender()), Outbox(), max_text_chars=100,  # type: ignore[arg-type]
                  primary_app_id="cli_a", rules=Rules(**rules),  # type: ignore[arg-type]
                  ingest=kept(100))
    take.bot_open_ids["cli_a"] = BOT
    return take, store


def message(chat: str, text: str, *, group: bool = False) -> tuple[str, bytes]:
    mentions = [{"key": "@_user_1", "id": {"open_id": BOT}, "name": "Bot"}] if group else []
    event = message_receive_event(IncomingMessage(
        f"om_{uuid.uuid4().hex[:12]}", chat, "group" if group else "p2p", "text",
        json.dumps({"text": f"@_user_1 {text}" if group else text}), "ou_user",
        next(CREATED), mentions=mentions), app_id="cli_a")
    return "event", json.dumps(event).encode()


def waiting(store: ChatStore, chat: str) -> list[str]:
    return [m.text for _, m in store.pending(chat) if m is not None]


def test_a_message_refused_when_redis_failed_is_taken_first_by_the_next_step(
        client: redis.Redis) -> None:
    port = client.connection_pool.connection_kwargs["port"]
    hasty = redis_client(f"redis://127.0.0.1:{port}", 0.2, retries=0)  # as a listener's
    take, _ = intake(hasty)
    store = ChatStore(client, StoreConfig())
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    first = message(chat, "m0")
    client.client_pause(800)
    assert all(isinstance(a, TakeLater) for a in take.on_frames("cli_a", [first]))
    assert take.refused.count("cli_a") == 1, "kept to take later"
    client.ping()  # (answered once the pause is over)
    later = message(chat, "m1")
    assert take.on_frames("cli_a", [later]) == [None]
    assert waiting(store, chat) == ["m0", "m1"], "the refused one first, in its place"
    assert len(take.refused) == 0
    assert take.on_frames("cli_a", [first]) == [None], "Feishu's delivery again: a duplicate"
    assert waiting(store, chat) == ["m0", "m1"]
    hasty.close()


def test_a_chat_with_a_message_kept_waits_behind_it_while_other_chats_go_on(
        client: redis.Redis) -> None:
    """The bot's identity is unknown: a group @mention cannot be judged, so it is kept; the
    group's next message waits behind it (kept too), a direct message of another chat is
    taken; once the identity is known, the next step takes the group's two in order."""
    take, store = intake(client, require_mention=True)
    take.bot_open_ids["cli_a"] = ""
    group, dm = f"oc_{uuid.uuid4().hex[:8]}", f"oc_{uuid.uuid4().hex[:8]}"
    answers = take.on_frames("cli_a", [message(group, "g0", group=True), message(dm, "d0")])
    assert isinstance(answers[0], TakeLater) and answers[1] is None
    take.bot_open_ids["cli_a"] = BOT  # (known now, but g0 is still kept: g1 waits for it)
    answers = take.on_frames("cli_a", [message(group, "g1", group=True)])
    assert answers == [None], "g0 taken first, then g1"
    assert waiting(store, group) == ["g0", "g1"] and waiting(store, dm) == ["d0"]


def test_the_next_message_of_a_chat_with_one_kept_is_refused_and_kept_behind_it(
        client: redis.Redis) -> None:
    take, store = intake(client, require_mention=True)
    take.bot_open_ids["cli_a"] = ""
    group = f"oc_{uuid.uuid4().hex[:8]}"
    g0 = message(group, "g0", group=True)
    assert isinstance(take.on_frames("cli_a", [g0])[0], TakeLater)
    d1 = message(group, "g1 (a direct line of the same chat id, judged without identity)")
    assert isinstance(take.on_frames("cli_a", [d1])[0], TakeLater), "behind g0"
    assert take.refused.count("cli_a") == 2 and waiting(store, group) == []
    take.bot_open_ids["cli_a"] = BOT
    assert take.on_frames("cli_a", []) == []
    assert [t[:2] for t in waiting(store, group)] == ["g0", "g1"]


def test_more_kept_than_one_step_takes_keep_their_order_with_what_comes_behind(
        client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Five group messages kept while the identity is unknown; a step takes two of them at
    once: the next message of the group, refused behind the three still kept, is taken
    after them (it was put ahead of them, and taken before them)."""
    store = ChatStore(client, StoreConfig())
    take = Intake(store, Publisher(Sender()), Outbox(), max_text_chars=100,  # type: ignore[arg-type]
                  primary_app_id="cli_a", rules=Rules(require_mention=True),
                  ingest=kept(100, at_once=2))
    take.bot_open_ids["cli_a"] = ""
    group = f"oc_{uuid.uuid4().hex[:8]}"
    frames = [message(group, f"g{n}", group=True) for n in range(6)]
    names = {json.loads(payload)["event"]["message"]["message_id"]: f"g{n}"
             for n, (_, payload) in enumerate(frames)}
    answers = take.on_frames("cli_a", frames[:5])
    assert all(isinstance(a, TakeLater) for a in answers)
    take.bot_open_ids["cli_a"] = BOT
    with caplog.at_level(logging.DEBUG, "gateway.listener.intake"):
        answers = take.on_frames("cli_a", frames[5:])
        assert isinstance(answers[0], TakeLater), "behind the three still kept"
        while len(take.refused):
            take.on_frames("cli_a", [])
    lines = [r.getMessage() for r in caplog.records]
    taken = [names[line.split(" ")[1]] for line in lines
             if line.split(" ")[1] in names and (": queued" in line or ": claimed" in line)]
    assert taken == ["g0", "g1", "g2", "g3", "g4", "g5"], "taken in the order they were sent"


def test_an_event_redis_refuses_outright_is_not_kept_and_holds_nothing(
        client: redis.Redis) -> None:
    """A chat whose inbox key has the wrong type (a step Redis refuses each time, unlike a
    blip): its message is answered 500 and left to Feishu's delivery again, not kept, so it
    neither holds its chat nor fails the batch: the other chat's message beside it, and the
    next messages, are taken."""
    take, store = intake(client)
    broken, fine = f"oc_{uuid.uuid4().hex[:8]}", f"oc_{uuid.uuid4().hex[:8]}"
    client.set(store.keys(broken).inbox, "not a list")
    answers = take.on_frames("cli_a", [message(broken, "b0"), message(fine, "f0")])
    assert isinstance(answers[0], Exception) and not isinstance(answers[0], TakeLater)
    assert "WRONGTYPE" in str(answers[0]) and answers[1] is None
    assert len(take.refused) == 0, "not kept: Feishu delivers it again"
    assert take.on_frames("cli_a", [message(fine, "f1")]) == [None]
    assert waiting(store, fine) == ["f0", "f1"]


def test_a_card_click_is_never_kept_and_the_cap_bounds_what_is() -> None:
    refused = Refused(cap=2)
    click = json.dumps({"schema": "2.0", "header": {"event_type": "card.action.trigger"},
                        "event": {}}).encode()
    assert not refused.keep("cli_a", click)
    kept = [refused.keep("cli_a", message(f"oc_{n}", "hi")[1]) for n in range(3)]
    assert kept == [True, True, False] and len(refused) == 2
    assert refused.holds("cli_a", "oc_0") and not refused.holds("cli_a", "oc_2")
    taken = refused.take("cli_a", 5)
    assert [k.chat for k in taken] == ["oc_0", "oc_1"]
    assert refused.holds("cli_a", "oc_0"), "in flight, it still holds its chat"
    refused.done("cli_a", taken)
    assert not refused.holds("cli_a", "oc_0") and len(refused) == 0


def test_a_message_refused_while_the_outbox_is_full_is_taken_once_it_drained(
        client: redis.Redis) -> None:
    store = ChatStore(client, StoreConfig())
    outbox = Outbox(cap=1)
    take = Intake(store, Publisher(Sender()), outbox, max_text_chars=100,  # type: ignore[arg-type]
                  primary_app_id="cli_a", ingest=kept(100))
    chat = f"oc_{uuid.uuid4().hex[:8]}"
    outbox.submit(lambda: None)  # (a publish the broker has not taken yet)
    assert isinstance(take.on_frames("cli_a", [message(chat, "m0")])[0], TakeLater)
    assert take.refused.count("cli_a") == 1 and waiting(store, chat) == []
    outbox.start()  # the broker takes what waited
    outbox.stop()
    assert take.on_frames("cli_a", []) == [], "an empty step takes it"
    assert waiting(store, chat) == ["m0"] and len(take.refused) == 0

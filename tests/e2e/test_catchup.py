"""Catch-up after an outage: messages users sent while no listener was connected (Feishu
pushed them to no one and gave up) are read back from the messages list API when a
listener connects again, answered once, in order, with a note that they were answered
late; a command sent meanwhile is not run; a catch-up whose listener dies is taken over
and resumed from its progress; a message pushed during the catch-up is answered once.

The gap is real but short (FEISHU_CATCHUP_AFTER_S=2, measured on Redis's clock); the same
arithmetic over 2 minutes of a stepped Redis clock: tests/listener/test_catchup_book.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from gateway.listener.catchup.catchup_book import job_key, lease_key, up_key
from gateway.listener.desk import LATE_NOTICE
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from gateway.worker.sending import LATE_ANSWER_NOTE
from tests.support.clocks import SteppedClock
from tests.support.replies import replies_to
from tests.support.rig import Rig, rig_up

AFTER_S = 2.0


@pytest.fixture
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A gateway of its own (its listeners die), mention gating on in groups, pages of two
    messages."""
    with rig_up(tmp_path_factory, supervise=False, kill=True,
                FEISHU_CATCHUP_AFTER_S=str(AFTER_S), FEISHU_CATCHUP_PAGE_SIZE="2",
                FEISHU_REQUIRE_MENTION="true") as rig:
        yield rig


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def outage(rig: Rig, *dead: GatewayProcess) -> None:
    """Every listener killed; from now on Feishu pushes nothing (and never will)."""
    for proc in dead:
        proc.kill()
    rig.sim.set_outage(True)


def wait_out_the_gap(client: redis.Redis, app_id: str) -> None:
    """Until no listener has beaten for longer than FEISHU_CATCHUP_AFTER_S and the second a
    listener's reading of Feishu's clock may be off by (a Date header's resolution)."""
    wait_until(lambda: server_ms(client) - int(client.get(up_key(app_id)) or 0)
               > AFTER_S * 1000 + 1300, 10, "the gap to outlast FEISHU_CATCHUP_AFTER_S")


def answer(sim: Simulator, chat_id: str, message_id: str) -> str:
    found = wait_until(lambda: replies_to(sim, chat_id).get(message_id), 40,
                       f"the answer to {message_id}")
    assert isinstance(found, list) and len(found) == 1, f"answered once: {found}"
    return str(found[0])


def test_what_users_wrote_during_an_outage_is_answered_once_in_order_and_late(
        rig: Rig) -> None:
    sim, client = rig.sim, rig.client()
    dm, group = "oc_catchup_dm", "oc_catchup_group"
    mention = [sim.mention_bot()]
    before = sim.send_text(dm, "before")
    hi = sim.send_text(group, "hi", chat_type="group", mentions=mention)
    assert answer(sim, dm, before) == "echo: before" and answer(sim, group, hi) == "echo: hi"
    [listener] = [p for p in rig.fleet.started if p.name.startswith("listener")]
    outage(rig, listener)
    wrote = [sim.send_text(dm, text) for text in ("one", "two", "/stop", "three")]
    asked = sim.send_text(group, "four", chat_type="group", mentions=mention)
    chatter = sim.send_text(group, "not for the bot", chat_type="group")
    elsewhere = sim.send_text("oc_never_active", "a chat nobody wrote to before")
    wait_out_the_gap(client, sim.app_id)
    sim.set_outage(False)
    rig.listener()
    one, two, stop, three = wrote
    for message_id, text in ((one, "one"), (two, "two"), (three, "three")):
        assert answer(sim, dm, message_id) == f"{LATE_ANSWER_NOTE}\n\necho: {text}"
    assert answer(sim, group, asked) == f"{LATE_ANSWER_NOTE}\n\necho: four"
    assert answer(sim, dm, stop) == LATE_NOTICE, "a command from the outage is not run"
    order = [m.reply_to for m in sim.sent_messages(dm) if m.reply_to != stop]
    assert order == [before, one, two, three], "in the order they were sent"
    wait_until(lambda: not client.exists(job_key(sim.app_id)), 20, "the catch-up to end")
    replies = replies_to(sim, group)
    assert chatter not in replies, "mention gating holds for messages read back"
    assert elsewhere not in replies_to(sim, "oc_never_active"), "only chats active lately"
    assert replies_to(sim, dm)[before] == ["echo: before"], "nothing answered twice"
    assert "catch-up of app" in rig.fleet.logs("listener")


def test_a_dead_listeners_catch_up_is_taken_over_and_a_pushed_message_answered_once(
        rig: Rig) -> None:
    sim, client = rig.sim, rig.client()
    chats = ["oc_resume_a", "oc_resume_b"]
    for chat in chats:
        answer(sim, chat, sim.send_text(chat, "warm up"))
    [first] = [p for p in rig.fleet.started if p.name.startswith("listener")]
    outage(rig, first)
    wrote = {chat: [sim.send_text(chat, f"{chat} {n}") for n in range(3)] for chat in chats}
    wait_out_the_gap(client, sim.app_id)
    sim.set_outage(False)
    calls_before = len(sim.list_calls)  # (the first listener's own catch-up at its start)
    sim.pause_listing(after=1)  # one page is read, then the list API holds every call
    second, third = rig.listener(wait=False), rig.listener(wait=False)
    rig.fleet.wait_ready(second)
    rig.fleet.wait_ready(third)
    sim.wait_connected(2, timeout_s=30)
    wait_until(lambda: client.hget(job_key(sim.app_id), "token"), 20,
               "the first page's progress")
    pushed = sim.send_text(chats[0], "pushed during the catch-up")
    assert answer(sim, chats[0], pushed) == "echo: pushed during the catch-up"
    holder = str(client.get(lease_key(sim.app_id)) or "")
    dead = next(p for p in (second, third) if f":{p.pid}:" in holder)
    dead.kill()  # the catch-up's listener dies with a list call in flight
    sim.resume_listing()
    for chat in chats:
        for n, message_id in enumerate(wrote[chat]):
            assert answer(sim, chat, message_id) == f"{LATE_ANSWER_NOTE}\n\necho: {chat} {n}"
    wait_until(lambda: not client.exists(job_key(sim.app_id)), 20, "the catch-up to end")
    assert replies_to(sim, chats[0])[pushed] == ["echo: pushed during the catch-up"]
    first_pages = [c for c in sim.list_calls[calls_before:] if c.page_token == ""]
    assert len([c for c in first_pages if c.chat_id == first_pages[0].chat_id]) == 1, \
        "resumed from its progress: the page read before the death is not read again"


@pytest.mark.parametrize("redis_step_s", [0, -300])
def test_an_outage_is_read_back_on_feishus_clock_when_redis_runs_five_minutes_ahead(
        tmp_path_factory: pytest.TempPathFactory, redis_step_s: int) -> None:
    """The messages' create_time is on Feishu's clock, and so is the gap, as the listeners
    read it from Feishu's answers: a Redis whose clock runs ahead (a VM resumed, a
    failover), or steps back by more than the outage while it lasts, still reads the right
    minutes."""
    clock = SteppedClock(300)
    try:
        with rig_up(tmp_path_factory, supervise=False, kill=True,
                    server=clock.server_options(),
                    FEISHU_CATCHUP_AFTER_S=str(AFTER_S)) as ahead:
            sim, client, dm = ahead.sim, ahead.client(), f"oc_catchup_ahead{-redis_step_s}"
            answer(sim, dm, sim.send_text(dm, "before"))
            outage(ahead, *[p for p in ahead.fleet.started if p.name.startswith("listener")])
            began = time.monotonic()
            wrote = sim.send_text(dm, "while no listener ran")
            if redis_step_s:
                clock.step(redis_step_s)  # (Redis's clock alone: the gap looks negative there)
                wait_until(lambda: time.monotonic() - began > AFTER_S + 2, 10,
                           "the outage to outlast FEISHU_CATCHUP_AFTER_S on Feishu's clock")
            else:
                wait_out_the_gap(client, sim.app_id)
            sim.set_outage(False)
            ahead.listener()
            assert answer(sim, dm, wrote) == f"{LATE_ANSWER_NOTE}\n\necho: while no listener ran"
    finally:
        clock.close()


def test_a_listener_that_cannot_judge_group_messages_is_no_listener_to_catch_up(
        rig: Rig) -> None:
    """A listener started while Feishu's open API fails does not know its bot's identity,
    so it cannot take a group @mention: it is connected, yet it does not count as connected
    for catch-up. It dies before it learnt the identity, Feishu gives up re-sending, and
    the next listener reads the message back and answers it, late, once."""
    sim, client = rig.sim, rig.client()
    group, mention = "oc_catchup_unjudged", [sim.mention_bot()]
    hi = sim.send_text(group, "hi", chat_type="group", mentions=mention)
    assert answer(sim, group, hi) == "echo: hi"
    [first] = [p for p in rig.fleet.started if p.name.startswith("listener")]
    first.kill()
    sim.fail_bot_info("5xx-html")
    blind = rig.listener()
    sim.wait_connected(1, timeout_s=30)
    asked = sim.send_text(group, "are you there?", chat_type="group", mentions=mention)
    wait_out_the_gap(client, sim.app_id)  # (connected, but no beat: it cannot take events)
    blind.kill()
    sim.wait_redeliveries_settled(timeout_s=30)  # Feishu gave up on it
    assert asked not in replies_to(sim, group)
    sim.fail_bot_info(None)
    rig.listener()
    assert answer(sim, group, asked) == f"{LATE_ANSWER_NOTE}\n\necho: are you there?"

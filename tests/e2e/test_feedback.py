"""Reactions as feedback, end to end (simulator, real listener, real workers): a person's
reaction on an answer is recorded on the turn it answered (`feishu-gateway chat` shows it),
counted by emoji with bounded labels, and handed to the agent factory's `on_reaction` hook
on the low-priority queue; taking it back does the same. A reaction on a person's message,
one the bot made itself, one delivered twice, and one on a message the gateway never sent
each get one outcome, and none disturbs the chat."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.ops.embedded_redis import free_port
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.simulator.chat_events import reaction_event
from tests.support.agents import reactions_key
from tests.support.cli import read
from tests.support.replies import reply_of
from tests.support.rig import Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, GATEWAY_METRICS_PORT=str(free_port())) as rig:
        yield rig


def answer_to(sim: Simulator, chat_id: str, message_id: str) -> str:
    reply_of(sim, chat_id, message_id)
    return next(m.message_id for m in sim.sent_messages(chat_id) if m.reply_to == message_id)


def hooked(rig: Rig, chat_id: str, count: int) -> list[dict[str, Any]]:
    client = rig.client()
    found = wait_until(lambda: client.llen(reactions_key(chat_id)) >= count, 30,
                       f"{count} reaction(s) handed to the hook")
    assert found
    return [json.loads(raw) for raw in client.lrange(reactions_key(chat_id), 0, -1)]


def counted(rig: Rig, emoji: str, action: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{rig.env['GATEWAY_METRICS_PORT']}/metrics",
                     timeout=5).text
    series = f'gateway_reactions_total{{action="{action}",emoji="{emoji}"}}'
    return next((float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith(series)), 0.0)


def chat_reactions(rig: Rig, chat_id: str, turn: str) -> list[dict[str, str]]:
    view = read(rig.env, "chat", chat_id)
    return next(r["reactions"] for r in view["history"] if r["message_id"] == turn)


def test_a_reaction_on_an_answer_is_recorded_counted_and_handed_to_the_hook(rig: Rig) -> None:
    sim, dm = rig.sim, "oc_feedback_dm"
    asked = sim.send_text(dm, "hello")
    answer = answer_to(sim, dm, asked)
    liked = sim.react(answer, "THUMBSUP")
    odd = sim.react(answer, "SomeNewEmoji", operator_open_id="ou_other")
    first = hooked(rig, dm, 2)
    assert {(h["emoji"], h["added"], h["by"]) for h in first} == {
        ("THUMBSUP", True, "ou_user_1"), ("SomeNewEmoji", True, "ou_other")}
    assert all(h["answer_id"] == answer and h["turn_message_id"] == asked
               and h["chat_id"] == dm for h in first)
    assert wait_until(lambda: len(chat_reactions(rig, dm, asked)) == 2, 20, "two recorded")
    assert {(r["emoji"], r["by"]) for r in chat_reactions(rig, dm, asked)} == {
        ("THUMBSUP", "ou_user_1"), ("SomeNewEmoji", "ou_other")}
    assert counted(rig, "THUMBSUP", "added") == 1 and counted(rig, "other", "added") == 1
    sim.unreact(answer, liked)
    assert hooked(rig, dm, 3)[-1]["added"] is False
    assert wait_until(lambda: chat_reactions(rig, dm, asked) == [
        {"emoji": "SomeNewEmoji", "by": "ou_other"}], 20, "the thumbs-up taken back")
    assert counted(rig, "THUMBSUP", "removed") == 1
    assert odd and reply_of(sim, dm, sim.send_text(dm, "still here")) == "echo: still here"


def test_reactions_that_are_not_feedback_on_an_answer_are_ignored(rig: Rig) -> None:
    sim, dm = rig.sim, "oc_feedback_ignored"
    asked = sim.send_text(dm, "first")
    answer = answer_to(sim, dm, asked)
    sim.react(asked, "THUMBSUP")  # on the person's own message
    sim.react(answer, "Typing", operator_type="app")  # the bot's own mark
    sim.send_event({"schema": "2.0", "header": {"event_id": "ev_forged", "event_type":
                    "im.message.reaction.created_v1"}, "event": {"reaction_type": {}}})
    app = sim.apps.get(None).app_id
    sim.send_event(reaction_event("om_never_sent", "OK", True, "ou_user_1", "user", app_id=app))
    heart = reaction_event(answer, "HEART", True, "ou_user_1", "user", app_id=app)
    sim.send_event(heart)
    sim.send_event(heart)  # delivered again (the same event id): counted once
    assert [h["emoji"] for h in hooked(rig, dm, 1)] == ["HEART"]
    assert wait_until(lambda: chat_reactions(rig, dm, asked) == [
        {"emoji": "HEART", "by": "ou_user_1"}], 20, "only the heart recorded")
    wait_until(lambda: "not a message this bot sent" in rig.fleet.logs("listener"), 20,
               "the reaction on the person's message named")
    wait_until(lambda: "on om_never_sent ignored: the message cannot be read" in
               rig.fleet.logs("listener"), 20, "the reaction on an unknown message named")
    assert "reaction event dropped: reaction event without a usable message_id" in \
        rig.fleet.logs("listener")
    assert reply_of(sim, dm, sim.send_text(dm, "then")) == "echo: then"
    assert rig.client().llen(reactions_key(dm)) == 1
    assert counted(rig, "HEART", "added") == 1

"""Two of our bots in one group (the `edge` gateway: one listener serving two apps, mention
gating on): each bot a message addresses answers it once, as itself, even when its worker is
SIGKILLed mid-turn and Feishu redelivers either app's event; a message mentioning one bot is
answered by that one only; a /stop addressed to one bot stops only that bot's turn."""

from __future__ import annotations

import pytest

from gateway.feishu.outbound.delivery import reply_uuid
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from tests.support.cli import cli, ok, read
from tests.support.replies import agent_events
from tests.support.rig import EDGE_SECOND_APP, Rig

SECOND_APP, _, SECOND_BOT = EDGE_SECOND_APP


@pytest.fixture
def rig(edge: Rig) -> Rig:
    return edge


def answers(sim: Simulator, chat: str, message_id: str) -> list[tuple[str | None, str]]:
    """(app, text) of every reply to `message_id`, in order."""
    return [(m.app_id, m.text) for m in sim.sent_messages(chat) if m.reply_to == message_id]


def both(sim: Simulator) -> list[dict[str, object]]:
    return [sim.mention_bot("@_user_1"), sim.mention_bot("@_user_2", app_id=SECOND_APP)]


def test_each_bot_mentioned_answers_once_as_itself_through_a_crash_and_redeliveries(
        rig: Rig) -> None:
    sim, chat, first = rig.sim, "oc_two_bots", rig.sim.app_id
    # each bot's turn kills its worker process once (its own token: the text it reads names
    # the other bot), then runs again
    mid = sim.send_text(chat, "crashonce two-bots @_user_1 @_user_2", chat_type="group",
                        mentions=both(sim))
    wait_until(lambda: len(answers(sim, chat, mid)) >= 2, 60, "both bots' answers")
    assert sorted(answers(sim, chat, mid)) == sorted([
        (first, f"echo: crashonce two-bots @{sim.mention_bot(app_id=SECOND_APP)['name']}"),
        (SECOND_APP, f"echo: crashonce two-bots @{sim.mention_bot()['name']}")])
    uuids = {m.uuid for m in sim.sent_messages(chat) if m.reply_to == mid}
    assert len(uuids) == 2, "each bot's reply a uuid of its own (Feishu may keep one per uuid)"
    for app in (first, SECOND_APP):
        sim.redeliver(mid, app_id=app)
    wait_until(lambda: len(sim.acks_of(mid)) >= 4, 20, "the redeliveries' ACKs")
    marker = sim.send_text(chat, "marker @_user_1 @_user_2", chat_type="group",
                           mentions=both(sim))
    wait_until(lambda: len(answers(sim, chat, marker)) == 2, 30, "the marker's answers")
    assert len(answers(sim, chat, mid)) == 2, "a redelivered event of either app: no answer"

    to_second = sim.send_text(chat, "only you", chat_type="group",
                              mentions=[sim.mention_bot(app_id=SECOND_APP)])
    # an app that reads every group message (modelled by naming it) still gates on its own
    # bot's mention: the first bot is not addressed here
    not_first = sim.send_text(chat, "still only you", chat_type="group", app_id=first,
                              mentions=[sim.mention_bot(app_id=SECOND_APP)])
    after = sim.send_text(chat, "and you", chat_type="group", mentions=[sim.mention_bot()])
    wait_until(lambda: answers(sim, chat, after), 30, "the first bot's next answer")
    wait_until(lambda: answers(sim, chat, to_second), 30, "the second bot's answer")
    assert answers(sim, chat, to_second) == [(SECOND_APP, "echo: only you")]
    assert answers(sim, chat, not_first) == [], "ordered before `after`: it was refused"


def test_a_stop_addressed_to_one_bot_stops_only_its_turn(rig: Rig) -> None:
    sim, chat, first = rig.sim, "oc_two_bots_stop", rig.sim.app_id
    asked = sim.send_text(chat, "sleep 4 @_user_1 @_user_2", chat_type="group",
                          mentions=both(sim))
    wait_until(lambda: sum(e["event"] == "start" and e["message_id"] == asked
                           for e in agent_events(rig.client(), chat)) == 2, 30,
               "both bots' turns to run")
    stop = sim.send_text(chat, "@_user_1 /stop", chat_type="group",
                         mentions=[sim.mention_bot("@_user_1", app_id=SECOND_APP)])
    wait_until(lambda: answers(sim, chat, stop), 20, "the stop's answer")
    assert answers(sim, chat, stop) == [(SECOND_APP, "Stopped.")]
    assert [m.uuid for m in sim.sent_messages(chat) if m.reply_to == stop][0] != reply_uuid(
        stop, "command"), "the command's answer: a uuid of its bot's own"
    wait_until(lambda: answers(sim, chat, asked), 30, "the first bot's answer")
    assert answers(sim, chat, asked) == [
        (first, f"echo: sleep 4 @{sim.mention_bot(app_id=SECOND_APP)['name']}")]
    marker = sim.send_text(chat, "marker", chat_type="group",
                           mentions=[sim.mention_bot(app_id=SECOND_APP)])
    wait_until(lambda: answers(sim, chat, marker), 30, "the second bot's next answer")
    assert answers(sim, chat, asked) == answers(sim, chat, asked)[:1], "stopped: no answer"


def test_the_operator_sees_each_bots_state_of_a_chat_and_names_one_with_app(rig: Rig) -> None:
    sim, chat, first = rig.sim, "oc_two_bots_ops", rig.sim.app_id
    mid = sim.send_text(chat, "hi @_user_1 @_user_2", chat_type="group", mentions=both(sim))
    wait_until(lambda: len(answers(sim, chat, mid)) == 2, 30, "both bots' answers")
    views = read(rig.env, "chat", chat)
    assert [v["chat_id"] for v in views] == [f"{chat}@{first}", f"{chat}@{SECOND_APP}"]
    assert all([h["message_id"] for h in v["history"]] == [mid] for v in views)
    assert read(rig.env, "chat", chat, "--app", SECOND_APP)["chat_id"] == f"{chat}@{SECOND_APP}"
    assert read(rig.env, "chat", f"{chat}@{first}")["history"][0]["turn_id"].startswith(
        f"turn:{chat}@{first}:{mid}:")
    several = cli(rig.env, "stop", chat)
    assert several.returncode == 1 and "name one with --app" in several.stderr
    assert ok(rig.env, "stop", chat, "--app", SECOND_APP).startswith(
        f"chat {chat}@{SECOND_APP}: nothing")


def test_a_refused_direct_message_is_told_by_the_bot_it_was_sent_to(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_dm_stranger_second"
    refused = sim.send_text(chat, "let me in", sender_open_id="ou_stranger", app_id=SECOND_APP)
    wait_until(lambda: answers(sim, chat, refused), 20, "the notice")
    assert [app for app, _ in answers(sim, chat, refused)] == [SECOND_APP]

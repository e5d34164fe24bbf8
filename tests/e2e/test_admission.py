"""Admission end to end (the `edge` gateway, e2e/conftest.py): a listener with the default
mention gating, a DM allowlist and one group rule; refusals never reach a worker. (Every
case of the rules themselves: feishu/inbound/test_admission.py.)"""

from __future__ import annotations

import pytest

from gateway.listener.desk import REFUSED_NOTICE
from gateway.ops.processes import wait_until
from tests.support.replies import agent_events, replies_to
from tests.support.rig import Rig


@pytest.fixture
def rig(edge: Rig) -> Rig:
    return edge


def test_group_messages_need_the_mention_and_refusals_never_reach_a_worker(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_gated_group"
    ignored = sim.send_text(chat, "just chatting", chat_type="group")
    other = sim.send_text(chat, "hi @Bob", chat_type="group",
                          mentions=[sim.mention_user("ou_bob", "Bob")])
    addressed = sim.send_text(chat, "hello bot", chat_type="group",
                              mentions=[sim.mention_bot()])
    wait_until(lambda: addressed in replies_to(sim, chat), 20, "the addressed message's reply")
    assert replies_to(sim, chat) == {addressed: ["echo: hello bot"]}
    assert {a.code for a in sim.acks if a.message_id in (ignored, other)} == {200}
    started = [e["message_id"] for e in agent_events(rig.client(), chat) if e["event"] == "start"]
    assert started == [addressed], "refused messages never reach a worker"
    quiet = sim.send_text("oc_quiet_team", "no mention needed here", chat_type="group")
    wait_until(lambda: quiet in replies_to(sim, "oc_quiet_team"), 20, "the group rule")


def test_a_refused_dm_is_told_politely_once_and_an_allowed_one_answered(rig: Rig) -> None:
    sim = rig.sim
    first = sim.send_text("oc_dm_stranger", "let me in", sender_open_id="ou_stranger")
    wait_until(lambda: first in replies_to(sim, "oc_dm_stranger"), 20, "the notice")
    again = sim.send_text("oc_dm_stranger", "please", sender_open_id="ou_stranger")
    friend = sim.send_text("oc_dm_friend", "hi", sender_open_id="ou_friend")
    wait_until(lambda: friend in replies_to(sim, "oc_dm_friend"), 20, "the friend's reply")
    wait_until(lambda: any(a.message_id == again for a in sim.acks), 10, "the second ACK")
    assert replies_to(sim, "oc_dm_stranger") == {first: [REFUSED_NOTICE]}, "once a day"
    assert replies_to(sim, "oc_dm_friend")[friend] == ["echo: hi"]
    assert "refused: sender not in the allowlist" in rig.fleet.logs("listener")
    assert not agent_events(rig.client(), "oc_dm_stranger")


def test_in_groups_each_user_continues_a_conversation_of_their_own(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_quiet_team"  # no mention needed there
    asked = [sim.send_text(chat, "whoami", chat_type="group", sender_open_id=user)
             for user in ("ou_user_1", "ou_friend", "ou_user_1")]
    wait_until(lambda: all(m in replies_to(sim, chat) for m in asked), 20, "three answers")
    sessions = [replies_to(sim, chat)[m][0].split()[1] for m in asked]
    assert sessions[0] == sessions[2] != sessions[1]
    # this gateway serves two apps: each bot's sessions are its own (`<chat>@<app>`)
    bot = f"{chat}@{sim.app_id}"
    assert sessions[0].startswith(f"{bot}/ou_user_1#") and f"{bot}/ou_friend#" in sessions[1]
    dm = sim.send_text("oc_dm_friend", "whoami", sender_open_id="ou_friend")
    wait_until(lambda: dm in replies_to(sim, "oc_dm_friend"), 20, "the direct answer")
    assert replies_to(sim, "oc_dm_friend")[dm][0].startswith(
        f"session oc_dm_friend@{sim.app_id}#")

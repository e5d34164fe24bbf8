"""Admission, every case: DM policy × group policy × chat type × sender × mention state ×
mention gating × @_all × bots allowed × bot identity known. The expected outcome is the
table in docs/replies-and-access.md, written out as plainly as possible."""

from __future__ import annotations

import itertools

import pytest

from gateway.feishu.inbound.admission import (
    DM_POLICIES,
    GROUP_POLICIES,
    Arrival,
    GroupRule,
    Rules,
    admit,
)
from gateway.listener.control import REFUSED_NOTICE
from gateway.ops.processes import wait_until
from tests.conftest import Rig
from tests.test_pipeline import agent_events, replies_to

BOT, ADMIN, ALLOWED, STRANGER, OTHER_BOT = "ou_bot", "ou_admin", "ou_allowed", "ou_x", "ou_b2"
SENDERS = {"admin": (ADMIN, "user"), "allowed": (ALLOWED, "user"),
           "stranger": (STRANGER, "user"), "own bot": (BOT, "app"),
           "other bot": (OTHER_BOT, "app")}
MENTIONS = {"none": ((), False), "the bot": ((BOT,), False), "someone else": (("ou_y",), False),
            "@_all": ((), True)}


def expected(chat_type: str, dm: str, group: str, sender: str, mention: str,
             require_mention: bool, mention_all: bool, allow_bots: bool,
             identity_known: bool) -> bool:
    if sender == "own bot":
        return False
    if sender == "other bot" and not (allow_bots and identity_known):
        return False
    listed = sender in ("admin", "allowed")
    if chat_type == "p2p":
        return dm == "open" or (dm == "allowlist" and listed)
    if group == "disabled" or (group == "allowlist" and not listed) or (
            group == "admin_only" and sender != "admin"):
        return False
    if not require_mention:
        return True
    if mention == "@_all" and mention_all:
        return True
    return identity_known and mention == "the bot"


CASES = list(itertools.product(["p2p", "group"], DM_POLICIES, GROUP_POLICIES, SENDERS,
                               MENTIONS, [True, False], [True, False], [True, False],
                               [True, False]))


def test_admission_table() -> None:
    """All 7,680 cases in one test (a failure lists every case that disagrees)."""
    wrong = []
    for case in CASES:
        chat_type, dm, group, sender, mention, require_mention, mention_all, allow_bots, \
            known = case
        open_id, kind = SENDERS[sender]
        mentioned, everyone = MENTIONS[mention]
        rules = Rules(dm_policy=dm, group_policy=group,
                      allowed=frozenset({ALLOWED}), admins=frozenset({ADMIN}),
                      require_mention=require_mention, mention_all=mention_all,
                      allow_bots=allow_bots)
        verdict = admit(Arrival("oc_1", chat_type, open_id, kind, mentioned, everyone),
                        rules, BOT if known else "")
        told = not verdict.admitted and chat_type == "p2p" and kind == "user"
        if verdict.admitted != expected(*case) or verdict.tell != told or not (
                verdict.admitted or verdict.reason):
            wrong.append((case, verdict))
    assert len(CASES) == 7680
    assert not wrong, f"{len(wrong)} cases disagree, first: {wrong[:3]}"


def test_a_group_rule_overrides_policy_mention_and_allowlist_for_that_group_only() -> None:
    rules = Rules(group_policy="disabled", groups={
        "oc_team": GroupRule(policy="allowlist", require_mention=False,
                             allowed=frozenset({STRANGER}))})
    team = Arrival("oc_team", "group", STRANGER)
    assert admit(team, rules, BOT).admitted, "listed in the group's own allowlist, no mention"
    assert not admit(Arrival("oc_team", "group", ALLOWED), rules, BOT).admitted
    refused = admit(Arrival("oc_other", "group", STRANGER, mentioned_open_ids=(BOT,)), rules,
                    BOT)
    assert not refused.admitted and refused.reason == "groups are disabled"


# End to end (conftest.edge): a listener with the default mention gating, a DM allowlist
# and one group rule.

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
    assert sessions[0].startswith(f"{chat}/ou_user_1#") and f"{chat}/ou_friend#" in sessions[1]
    dm = sim.send_text("oc_dm_friend", "whoami", sender_open_id="ou_friend")
    wait_until(lambda: dm in replies_to(sim, "oc_dm_friend"), 20, "the direct answer")
    assert replies_to(sim, "oc_dm_friend")[dm][0].startswith("session oc_dm_friend#")

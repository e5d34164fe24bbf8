"""Admission, every case: DM policy × group policy × chat type × sender × mention state ×
mention gating × @_all × bots allowed × bot identity known. The expected outcome is the
table in docs/replies-and-access.md, written out as plainly as possible."""

from __future__ import annotations

import itertools

from gateway.core.rules import DM_POLICIES, GROUP_POLICIES, GroupRule, Rules
from gateway.feishu.inbound.admission import Arrival, admit

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


def test_without_the_bots_identity_only_a_message_that_mentions_someone_waits() -> None:
    """A group message that mentions nobody cannot be addressed to the bot whoever it is: it
    is refused at once (no-mention), never kept waiting for the identity; one that mentions
    someone cannot be judged yet (identity-unknown: the listener takes it later)."""
    rules = Rules(require_mention=True)
    nobody = admit(Arrival("oc_1", "group", STRANGER, "user", (), False), rules, "")
    someone = admit(Arrival("oc_1", "group", STRANGER, "user", ("ou_y",), False), rules, "")
    assert (nobody.admitted, nobody.code) == (False, "no-mention")
    assert (someone.admitted, someone.code) == (False, "identity-unknown")

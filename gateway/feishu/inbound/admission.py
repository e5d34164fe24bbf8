"""Who gets in (pure): DM and group policies, per-group rules, allowlists, admins, @mention
gating in groups, other bots and the bot's own messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

DmPolicy = Literal["open", "allowlist", "disabled"]
GroupPolicy = Literal["open", "allowlist", "admin_only", "disabled"]
DM_POLICIES: tuple[DmPolicy, ...] = ("open", "allowlist", "disabled")
GROUP_POLICIES: tuple[GroupPolicy, ...] = ("open", "allowlist", "admin_only", "disabled")


@dataclass(frozen=True)
class GroupRule:
    """One group's own rule (FEISHU_GROUP_RULES); None fields take the defaults."""

    policy: GroupPolicy | None = None
    require_mention: bool | None = None
    allowed: frozenset[str] | None = None
    """Who may talk to the bot in this group under `allowlist`, instead of the global list."""


@dataclass(frozen=True)
class Rules:
    dm_policy: DmPolicy = "open"
    group_policy: GroupPolicy = "open"
    allowed: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    require_mention: bool = True
    mention_all: bool = False
    """Whether `@_all` (@everyone) counts as a mention of the bot."""
    allow_bots: bool = False
    groups: Mapping[str, GroupRule] = field(default_factory=dict)


@dataclass(frozen=True)
class Arrival:
    """What admission looks at in a message event."""

    chat_id: str
    chat_type: str
    sender_open_id: str
    sender_type: str = "user"
    mentioned_open_ids: tuple[str, ...] = ()
    mentions_all: bool = False


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    reason: str = ""
    """Why it was refused, for the one log line."""
    tell: bool = False
    """A refused DM from a person: they may be told, politely, once a day."""
    code: str = ""
    """The reason as a short fixed word, for metrics (no id or free text in it)."""


IN = Verdict(True)


def parse_group_rules(raw: str) -> dict[str, GroupRule]:
    """FEISHU_GROUP_RULES, a JSON object: chat id → {"policy", "require_mention",
    "allowed"} (each optional). ValueError saying what is wrong (pure)."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError('expected a JSON object such as {"oc_…": {"policy": "admin_only"}}')
    rules = {}
    for chat_id, spec in data.items():
        if not isinstance(spec, dict) or set(spec) - {"policy", "require_mention", "allowed"}:
            raise ValueError(f"{chat_id}: expected an object with policy, require_mention, "
                             "allowed")
        policy = spec.get("policy")
        if policy is not None and policy not in GROUP_POLICIES:
            raise ValueError(f"{chat_id}: policy must be one of {', '.join(GROUP_POLICIES)}")
        mention = spec.get("require_mention")
        if mention is not None and not isinstance(mention, bool):
            raise ValueError(f"{chat_id}: require_mention must be true or false")
        allowed = spec.get("allowed")
        if allowed is not None and not (isinstance(allowed, list)
                                        and all(isinstance(x, str) for x in allowed)):
            raise ValueError(f"{chat_id}: allowed must be a list of open ids")
        rules[str(chat_id)] = GroupRule(policy, mention,
                                        None if allowed is None else frozenset(allowed))
    return rules


def admit(a: Arrival, rules: Rules, bot_open_id: str) -> Verdict:
    """Admit or refuse one message. In a group with mention gating on, an unknown bot
    identity refuses (fails closed): the bot cannot tell it was addressed."""
    if a.sender_type != "user":
        if bot_open_id and a.sender_open_id == bot_open_id:
            return Verdict(False, "the bot's own message", code="own")
        if not bot_open_id:  # its own messages cannot be told apart: never a loop
            return Verdict(False, "sent by an app while the bot's identity is unknown",
                           code="identity-unknown")
        if not rules.allow_bots:
            return Verdict(False, f"sent by a {a.sender_type or 'non-user'} (bots are ignored)",
                           code="bot")
    admin = a.sender_open_id in rules.admins
    if a.chat_type == "p2p":
        return _dm(a, rules, admin)
    rule = rules.groups.get(a.chat_id, GroupRule())
    policy = rule.policy or rules.group_policy
    if policy == "disabled":
        return Verdict(False, "groups are disabled", code="groups-disabled")
    allowed = rules.allowed if rule.allowed is None else rule.allowed
    if policy == "allowlist" and not (admin or a.sender_open_id in allowed):
        return Verdict(False, "sender not in the group's allowlist", code="group-allowlist")
    if policy == "admin_only" and not admin:
        return Verdict(False, "sender is not an admin (admin_only group)", code="not-admin")
    needs_mention = rules.require_mention if rule.require_mention is None \
        else rule.require_mention
    if not needs_mention:
        return IN
    if a.mentions_all and rules.mention_all:
        return IN
    if not bot_open_id:
        return Verdict(False, "the bot's identity is unknown, so a mention cannot be checked",
                       code="identity-unknown")
    if bot_open_id in a.mentioned_open_ids:
        return IN
    return Verdict(False, "group message without an @mention of the bot", code="no-mention")


def _dm(a: Arrival, rules: Rules, admin: bool) -> Verdict:
    person = a.sender_type == "user"
    if rules.dm_policy == "disabled":
        return Verdict(False, "direct messages are disabled", code="dms-disabled", tell=person)
    if rules.dm_policy == "allowlist" and not (admin or a.sender_open_id in rules.allowed):
        return Verdict(False, "sender not in the allowlist", code="allowlist", tell=person)
    return IN

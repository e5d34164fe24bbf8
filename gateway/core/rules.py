"""What a DM or a group may do, as the settings say it (FEISHU_DM_POLICY,
FEISHU_GROUP_POLICY, FEISHU_GROUP_RULES, the allowlists, GATEWAY_BUSY_MODE): the policies,
what a chat does with messages that come while its turn runs, each group's own rule, and the
parser of FEISHU_GROUP_RULES. Pure values; admission applies them to a message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

DmPolicy = Literal["open", "allowlist", "disabled"]
GroupPolicy = Literal["open", "allowlist", "admin_only", "disabled"]
DM_POLICIES: tuple[DmPolicy, ...] = ("open", "allowlist", "disabled")
GROUP_POLICIES: tuple[GroupPolicy, ...] = ("open", "allowlist", "admin_only", "disabled")
BusyMode = Literal["queue", "merge", "interrupt"]
BUSY_MODES: tuple[BusyMode, ...] = ("queue", "merge", "interrupt")


def busy_mode(value: object) -> BusyMode:
    """A busy mode as the settings spell it; ValueError saying what is wrong (pure)."""
    if value not in BUSY_MODES:
        raise ValueError(f"busy mode must be one of {', '.join(BUSY_MODES)}")
    return value


@dataclass(frozen=True)
class GroupRule:
    """One group's own rule (FEISHU_GROUP_RULES); None fields take the defaults."""

    policy: GroupPolicy | None = None
    require_mention: bool | None = None
    allowed: frozenset[str] | None = None
    """Who may talk to the bot in this group under `allowlist`, instead of the global list."""
    busy: BusyMode | None = None
    """What the group does with messages sent while its turn runs, instead of the default."""


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
    busy: BusyMode = "queue"
    """What a chat does with messages sent while its turn runs (GATEWAY_BUSY_MODE)."""

    def busy_of(self, chat_id: str) -> BusyMode:
        """The chat's busy mode: its group's own, else the default."""
        rule = self.groups.get(chat_id)
        return rule.busy if rule is not None and rule.busy is not None else self.busy


def _json_object(raw: str, example: str) -> dict[str, Any]:
    """A setting's JSON object ({} when empty); ValueError saying what is wrong."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object such as {example}")
    return data


def parse_group_rules(raw: str) -> dict[str, GroupRule]:
    """FEISHU_GROUP_RULES, a JSON object: chat id → {"policy", "require_mention",
    "allowed", "busy"} (each optional). ValueError saying what is wrong (pure)."""
    data = _json_object(raw, '{"oc_…": {"policy": "admin_only"}}')
    rules = {}
    for chat_id, spec in data.items():
        if not isinstance(spec, dict) or set(spec) - {"policy", "require_mention", "allowed",
                                                       "busy"}:
            raise ValueError(f"{chat_id}: expected an object with policy, require_mention, "
                             "allowed, busy")
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
        busy = spec.get("busy")
        if busy is not None:
            try:
                busy = busy_mode(busy)
            except ValueError as error:
                raise ValueError(f"{chat_id}: {error}") from None
        rules[str(chat_id)] = GroupRule(policy, mention,
                                        None if allowed is None else frozenset(allowed), busy)
    return rules


MENU_KEY_MAX_CHARS = 30
"""Feishu's longest menu event_key."""
MENU_TEXT_MAX_CHARS = 4000


def parse_menu(raw: str) -> dict[str, str]:
    """FEISHU_MENU, a JSON object: menu event_key → the text the click stands for (a command
    such as "/new" or "/stop", or any text the agent receives as if typed). ValueError
    saying what is wrong."""
    data = _json_object(raw, '{"new_chat": "/new"}')
    menu = {}
    for key, text in data.items():
        if not (key.isprintable() and 0 < len(key) <= MENU_KEY_MAX_CHARS) or "|" in key:
            raise ValueError(f"{key!r:.40}: a menu key is 1 to {MENU_KEY_MAX_CHARS} printable "
                             "characters")
        if not isinstance(text, str) or not text.strip() or len(text) > MENU_TEXT_MAX_CHARS:
            raise ValueError(f"{key}: expected a text of 1 to {MENU_TEXT_MAX_CHARS} characters")
        menu[key] = text.strip()
    return menu

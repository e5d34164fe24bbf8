"""Who gets in (pure): the rules of gateway/core/rules.py applied to one message: DM and
group policies, per-group rules, allowlists, admins, @mention gating in groups, other bots
and the bot's own messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.rules import GroupRule, Rules
from gateway.feishu.inbound.fields import mapping


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


def admit(a: Arrival, rules: Rules, bot_open_id: str) -> Verdict:
    """Admit or refuse one message. In a group with mention gating on, a message that
    mentions someone cannot be judged while the bot's identity is unknown (identity-unknown:
    the listener takes it later); one that mentions nobody is refused at once."""
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
    if not a.mentioned_open_ids:  # (whoever the bot is, this mentions nobody)
        return Verdict(False, "group message without an @mention of the bot", code="no-mention")
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


def may_greet(rules: Rules, chat_type: str, chat_id: str, open_id: str) -> bool:
    """Whether the bot greets a group it was added to, or a user who opened its direct chat:
    not where it would answer nobody (groups disabled for the chat; direct messages
    disabled, or the user not allowed to send them)."""
    if chat_type == "p2p":
        return _dm(Arrival(chat_id, "p2p", open_id, "user"), rules,
                   open_id in rules.admins).admitted
    return (rules.groups.get(chat_id, GroupRule()).policy or rules.group_policy) != "disabled"

def arrival_of(payload: Mapping[str, Any]) -> Arrival:
    """What admission looks at, read leniently from a message event (missing parts are
    empty: admission then refuses what it cannot tell apart)."""
    event = mapping(payload.get("event", payload))
    message, sender = mapping(event.get("message")), mapping(event.get("sender"))
    sender_id = mapping(sender.get("sender_id"))
    ids, everyone = [], False
    for mention in _items(message.get("mentions")):
        if not isinstance(mention, Mapping):
            continue
        everyone = everyone or mention.get("key") == "@_all"
        ident = mention.get("id")
        if isinstance(ident, Mapping) and ident.get("open_id"):
            ids.append(str(ident["open_id"]))
    content = message.get("content")
    everyone = everyone or (isinstance(content, str) and "@_all" in content)
    return Arrival(chat_id=str(message.get("chat_id") or ""),
                   chat_type=str(message.get("chat_type") or "p2p"),
                   sender_open_id=str(sender_id.get("open_id") or ""),
                   sender_type=str(sender.get("sender_type") or "user"),
                   mentioned_open_ids=tuple(ids), mentions_all=everyone)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []

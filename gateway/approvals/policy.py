"""Who may decide an approval request, and what a decision is (pure).
"""

from __future__ import annotations

from typing import Literal

Decision = Literal["once", "session", "always", "deny"]
Outcome = Literal["once", "session", "always", "deny", "expired"]
DECISIONS: tuple[Decision, ...] = ("once", "session", "always", "deny")
LABELS: dict[str, str] = {"once": "Allow once", "session": "Allow for this session",
                          "always": "Always allow", "deny": "Deny"}
DONE_LABELS: dict[str, str] = {"once": "allowed once", "session": "allowed for this session",
                               "always": "always allowed", "deny": "denied",
                               "expired": "expired", "stopped": "stopped"}


def may_decide(clicker: str, *, requester: str, chat_type: str, dm_user: str,
               admins: frozenset[str], allowed: frozenset[str]) -> bool:
    """True when `clicker` (an open_id) may decide a request of `requester`.

    The requester, `FEISHU_ADMINS` and `FEISHU_ALLOWED_USERS` may, anywhere. In a DM
    (chat_type "p2p") the DM's own user always may: a group's policy never decides a DM
    approval. In a group with neither list set, only the requester may."""
    if not clicker:
        return False
    if clicker == requester or clicker in admins or clicker in allowed:
        return True
    return chat_type == "p2p" and bool(dm_user) and clicker == dm_user


def parse_decision(value: object) -> Decision | None:
    """A button's `decision`, or None when it is not one."""
    for decision in DECISIONS:
        if value == decision:
            return decision
    return None

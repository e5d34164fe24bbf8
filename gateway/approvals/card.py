"""The approval card: pending (four buttons), resolved, expired (pure builders of Feishu's
interactive card JSON). Each button's `value` carries the request id and the decision, so
tools and tests can read it whatever the labels' language.
"""

from __future__ import annotations

from typing import Any

from gateway.approvals.policy import DECISIONS, DONE_LABELS, LABELS

BUTTON_TYPES = {"once": "primary", "session": "default", "always": "default", "deny": "danger"}
MAX_PROMPT_CHARS = 2000


def _shown(prompt: str) -> str:
    return prompt if len(prompt) <= MAX_PROMPT_CHARS else prompt[:MAX_PROMPT_CHARS] + " …"


def _card(title: str, template: str, elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"config": {"wide_screen_mode": True, "update_multi": True},
            "header": {"title": {"tag": "plain_text", "content": title}, "template": template},
            "elements": elements}


def _prompt(prompt: str) -> dict[str, Any]:
    return {"tag": "div", "text": {"tag": "plain_text", "content": _shown(prompt)}}


def pending_card(request_id: str, prompt: str, chat_id: str,
                 thread_id: str = "") -> dict[str, Any]:
    """The card asking; its buttons name the chat, and the topic (thread) the request was
    asked in, whose state keeps it."""
    bound = {"chat_id": chat_id, **({"thread_id": thread_id} if thread_id else {})}
    buttons = [{"tag": "button", "text": {"tag": "plain_text", "content": LABELS[d]},
                "type": BUTTON_TYPES[d],
                "value": {"request_id": request_id, "decision": d, **bound}}
               for d in DECISIONS]
    return _card("Approval needed", "orange", [
        _prompt(prompt), {"tag": "action", "actions": buttons},
        {"tag": "note", "elements": [{"tag": "plain_text",
                                      "content": "Or answer /approve or /deny in this chat."}]}])


def resolved_card(prompt: str, state: str, by: str) -> dict[str, Any]:
    """The card once decided (`by`: who) or ended (expired, stopped)."""
    done = DONE_LABELS.get(state, state)
    who = f" by <at id={by}></at>" if by else ""
    template = {"deny": "red", "expired": "grey", "stopped": "grey"}.get(state, "green")
    return _card(f"Approval {done}", template, [
        _prompt(prompt), {"tag": "div", "text": {"tag": "lark_md",
                                                 "content": f"**{done.capitalize()}**{who}"}}])

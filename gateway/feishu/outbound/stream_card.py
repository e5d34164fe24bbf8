"""The cards of a streamed answer (JSON 2.0, pure builders): while it streams, the answer
element (its text, the current step above it) and a Stop button; once closed, the answer, a
collapsed panel listing the finished steps with their times, and the closing mark.

The Stop button's callback `value` names what it stops: {"action": "stop", "chat": the
chat's state id, "turn": the message whose turn it is, "requester", "chat_type"}; the
listener checks who clicked against it (docs/replies-and-access.md#the-stop-button).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.feishu.outbound.render import card_json

ANSWER_ELEMENT_ID = "answer"
STOP_ACTION = "stop"
STOP_ELEMENT_ID = "stop"
STOP_LABEL = "Stop"
STOPPED_MARK = "⏹ Stopped."
INTERRUPTED_MARK = "⏹ Interrupted by your next message: answering them together."
CURRENT_MARK = "⏳"


def with_step(text: str, step: str) -> str:
    """What a streaming surface shows: the current step as a short line above the answer
    so far (pure)."""
    if not step:
        return text
    return f"{CURRENT_MARK} {step}\n\n{text}" if text.strip() else f"{CURRENT_MARK} {step}"


def answer_of(shown: str) -> str:
    """The answer so far in what a streaming surface showed (`with_step`'s), without the
    current step's line (pure)."""
    if not shown.startswith(f"{CURRENT_MARK} "):
        return shown
    _, _, rest = shown.partition("\n\n")
    return rest


def stopped_mark(by: str) -> str:
    """The mark of an answer stopped by `by` (an open_id: Feishu shows the name), or by a
    /stop ('')."""
    return f"⏹ Stopped by <at id={by}></at>" if by else STOPPED_MARK


def stop_value(chat: str, turn: str, requester: str, chat_type: str) -> dict[str, str]:
    return {"action": STOP_ACTION, "chat": chat, "turn": turn, "requester": requester,
            "chat_type": chat_type}


def stop_button(value: Mapping[str, str]) -> dict[str, Any]:
    return {"tag": "button", "element_id": STOP_ELEMENT_ID, "type": "danger", "size": "small",
            "text": {"tag": "plain_text", "content": STOP_LABEL},
            "behaviors": [{"type": "callback", "value": dict(value)}]}


def streaming_card(text: str, *, element_id: str,
                   stop: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The card while the answer streams: `text` (with the current step above it) in the
    element `element_id`, then the Stop button when `stop` is given."""
    card = card_json(text, element_id=element_id, streaming=True)
    if stop is not None:
        card["body"]["elements"].append(stop_button(stop))
    return card


def format_seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def steps_panel(steps: Sequence[tuple[str, float]], dropped: int,
                elapsed_s: float) -> dict[str, Any]:
    """The finished steps, collapsed: a header with their count and the time they took, one
    line per step inside."""
    count = len(steps) + dropped
    lines = [f"{n}. {text} ({format_seconds(took)})"
             for n, (text, took) in enumerate(steps, dropped + 1)]
    if dropped:
        lines.insert(0, f"… {dropped} earlier step{'s' if dropped > 1 else ''}")
    title = f"{count} step{'s' if count > 1 else ''} · {format_seconds(elapsed_s)}"
    return {"tag": "collapsible_panel", "element_id": "steps", "expanded": False,
            "header": {"title": {"tag": "plain_text", "content": title}},
            "elements": [{"tag": "markdown", "content": "\n".join(lines),
                          "text_size": "notation"}]}


def closed_card(text: str, *, element_id: str, footer: str = "",
                steps: Sequence[tuple[str, float]] = (), dropped: int = 0,
                elapsed_s: float = 0.0) -> dict[str, Any]:
    """The card once the answer is complete (or stopped, or broke off): `text`, the steps
    panel when there were steps, then `footer` in small type; streaming off, no button."""
    card = card_json(text, element_id=element_id, footer=footer)
    if steps or dropped:
        card["body"]["elements"].insert(1, steps_panel(steps, dropped, elapsed_s))
    return card

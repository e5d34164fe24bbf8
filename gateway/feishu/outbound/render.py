"""A markdown answer as a Feishu message: plain text, a post, or a card. Pure.

`auto` (FEISHU_REPLY_FORMAT) sends plain text as text, markdown as a post (its `md`
element renders headings, emphasis, links, lists and quotes), and an answer holding code
blocks or tables as a card (JSON 2.0: its markdown element renders fenced code with syntax
highlighting and tables, which a post shows raw).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.feishu.outbound.chunking import FENCE, tables_in

FORMATS = ("auto", "text", "post", "card")
TABLES_PER_CARD = 4
"""Feishu renders at most four tables in one card markdown element."""
_MARKDOWN = re.compile(
    r"^\s{0,3}#{1,6}\s|\*\*[^*\n]+\*\*|__[^_\n]+__|~~[^~\n]+~~|\[[^\]\n]+\]\([^)\s]+\)"
    r"|^\s*(?:[-*+]|\d{1,3}[.)])\s+\S|^\s{0,3}>\s|`[^`\n]+`", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Rendered:
    """One message body: `msg_type` and its content object (sent as a JSON string)."""

    msg_type: str
    content: dict[str, Any]


def pick_format(text: str, mode: str) -> str:
    """The form `text` goes out in under `mode` (auto | text | post | card)."""
    if mode != "auto":
        return mode
    if FENCE in text or tables_in(text):
        return "card"
    return "post" if _MARKDOWN.search(text) else "text"


def as_text(text: str) -> Rendered:
    return Rendered("text", {"text": text})


def as_post(text: str) -> Rendered:
    return Rendered("post", {"zh_cn": {"content": [[{"tag": "md", "text": text}]]}})


def card_json(text: str, *, element_id: str = "", streaming: bool = False,
              footer: str = "") -> dict[str, Any]:
    """A JSON 2.0 card whose body is `text` as one markdown element (and `footer`, in
    small grey type, when given)."""
    element: dict[str, Any] = {"tag": "markdown", "content": text}
    if element_id:
        element["element_id"] = element_id
    elements = [element]
    if footer:
        elements.append({"tag": "markdown", "content": footer, "text_size": "notation"})
    config: dict[str, Any] = {"update_multi": True}
    if streaming:
        config["streaming_mode"] = True
    return {"schema": "2.0", "config": config, "body": {"elements": elements}}


def as_card(text: str) -> Rendered:
    return Rendered("interactive", card_json(text))


def render(text: str, form: str) -> Rendered:
    """`text` in `form` (text | post | card)."""
    if form == "card":
        return as_card(text)
    if form == "post":
        return as_post(text)
    return as_text(text)


def forms_to_try(text: str, mode: str) -> list[str]:
    """The forms to try in order: the chosen one, then plain text if that was refused."""
    form = pick_format(text, mode)
    return [form] if form == "text" else [form, "text"]

"""What an agent reads for each Feishu message type (pure): text as sent, rich-text posts
with links, mentions, code blocks and images, and a readable line for every other type,
naming the keys an agent needs to fetch an attachment. An unknown type is a readable
placeholder, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_BREAK = "\x00"  # where a block element needs a line of its own


def _s(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _keyed(label: str, key: str) -> str:
    return f"[{label} {key}]" if key else f"[{label}]"


def _duration(ms: Any) -> str:
    try:
        seconds = int(ms) / 1000
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        return ""
    return f" {seconds:.0f}s" if seconds >= 1 else ""


def _element(element: Mapping[str, Any]) -> str:
    tag = element.get("tag")
    if tag == "text":
        return str(element.get("text", ""))
    if tag == "a":
        text, href = str(element.get("text", "")), _s(element.get("href"))
        return f"{text} ({href})" if href and href != text else text or href
    if tag == "at":
        name = _s(element.get("user_name")) or _s(element.get("user_id"))
        return f"@{name}" if name else ""
    if tag == "img":
        return _keyed("image", _s(element.get("image_key")))
    if tag == "media":
        return _keyed("video", _s(element.get("file_key")))
    if tag == "emotion":
        return f":{_s(element.get('emoji_type'))}:"
    if tag == "code_block":
        language = _s(element.get("language")).lower()
        code = str(element.get("text", "")).rstrip("\n")
        return f"{_BREAK}```{language}\n{code}\n```{_BREAK}"
    if tag == "hr":
        return f"{_BREAK}---{_BREAK}"
    if tag == "md":
        return str(element.get("text", ""))
    return str(element.get("text", ""))


def post_text(content: Mapping[str, Any]) -> str:
    """A rich-text post (optionally wrapped in a locale key) as text, keeping its layout."""
    if "content" not in content and content:
        first = next(iter(content.values()))
        if isinstance(first, Mapping):
            content = first
    lines: list[str] = []
    title = _s(content.get("title"))
    if title:
        lines.append(title)
    paragraphs = content.get("content")
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        if isinstance(paragraph, list):
            line = "".join(_element(e) for e in paragraph if isinstance(e, Mapping))
            # a block (code, rule) sits on lines of its own, wherever it is in the paragraph
            lines.append(line.strip(_BREAK).replace(_BREAK * 2, "\n").replace(_BREAK, "\n"))
    return "\n".join(lines)


def _card_text(content: Mapping[str, Any]) -> str:
    header = content.get("header")
    title = content.get("title") or (header.get("title") if isinstance(header, Mapping) else "")
    if isinstance(title, Mapping):
        title = title.get("content", "")
    return f"[card: {_s(title)}]" if _s(title) else "[card]"


def other_text(message_type: str, content: Mapping[str, Any]) -> str:
    """Every type but text and post."""
    if message_type == "image":
        return _keyed("image", _s(content.get("image_key")))
    if message_type == "file":
        name, key = _s(content.get("file_name")), _s(content.get("file_key"))
        return f"[file {name} ({key})]" if name else _keyed("file", key)
    if message_type == "audio":
        key = _s(content.get("file_key"))
        return f"[audio{_duration(content.get('duration'))}{' ' + key if key else ''}]"
    if message_type == "media":
        name, key = _s(content.get("file_name")), _s(content.get("file_key"))
        label = f"video {name}".strip() + _duration(content.get("duration"))
        return _keyed(label, key)
    if message_type == "sticker":
        return "[sticker]"
    if message_type == "share_chat":
        return _keyed("shared chat", _s(content.get("chat_id")))
    if message_type == "share_user":
        return _keyed("shared contact", _s(content.get("user_id")))
    if message_type == "location":
        name = _s(content.get("name"))
        where = f"{_s(content.get('latitude'))}, {_s(content.get('longitude'))}".strip(", ")
        return f"[location {name} ({where})]" if where else f"[location {name}]".replace(
            " ]", "]")
    if message_type == "todo":
        summary = content.get("summary")
        text = post_text(summary) if isinstance(summary, Mapping) else _s(summary)
        return f"[todo: {text}]" if text else "[todo]"
    if message_type == "merge_forward":
        return "[forwarded messages]"
    if message_type == "interactive":
        return _card_text(content)
    if message_type == "system":
        return "[system message]"
    return f"[{message_type} message]"

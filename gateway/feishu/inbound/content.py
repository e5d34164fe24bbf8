"""What an agent reads for each Feishu message type (pure): text as sent, rich-text posts
with links, mentions, code blocks and images, and a readable line for every other type; and
each attachment (an image, file, audio clip, video or sticker, a post's inline images and
videos included) as data (`attachments_of`), which the text names by a placeholder only
(`[image]`, `[file report.pdf]`). An unknown type is a readable placeholder, never an
error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gateway.core.model import Attachment

_BREAK = "\x00"  # where a block element needs a line of its own


def _s(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _ms(value: Any) -> int:
    try:
        ms = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        return 0
    return max(ms, 0)


def _duration(ms: Any) -> str:
    seconds = _ms(ms) / 1000
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
        return "[image]"
    if tag == "media":
        return "[video]"
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
        return "[image]"
    if message_type == "file":
        name = _s(content.get("file_name"))
        return f"[file {name}]" if name else "[file]"
    if message_type == "audio":
        return f"[audio{_duration(content.get('duration'))}]"
    if message_type == "media":
        name = _s(content.get("file_name"))
        return "[" + f"video {name}".strip() + _duration(content.get("duration")) + "]"
    if message_type == "sticker":
        return "[sticker]"
    if message_type == "share_chat":
        chat = _s(content.get("chat_id"))
        return f"[shared chat {chat}]" if chat else "[shared chat]"
    if message_type == "share_user":
        user = _s(content.get("user_id"))
        return f"[shared contact {user}]" if user else "[shared contact]"
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


def _post_elements(content: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    if "content" not in content and content:
        first = next(iter(content.values()))
        if isinstance(first, Mapping):
            content = first
    paragraphs = content.get("content")
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        if isinstance(paragraph, list):
            yield from (e for e in paragraph if isinstance(e, Mapping))


def attachments_of(message_type: str, content: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """The attachments of one message, in the order its text names them: an image, file,
    audio or video (`media`) message's one; a post's inline images and videos."""
    found: list[Attachment] = []
    if message_type == "post":
        for element in _post_elements(content):
            if element.get("tag") == "img" and _s(element.get("image_key")):
                found.append(Attachment("image", _s(element.get("image_key"))))
            elif element.get("tag") == "media" and _s(element.get("file_key")):
                found.append(Attachment("video", _s(element.get("file_key"))))
        return tuple(found)
    kind = {"image": "image", "file": "file", "audio": "audio", "media": "video"}.get(
        message_type)  # (a sticker's bytes are not Feishu's to hand out)
    key = _s(content.get("image_key" if kind == "image" else "file_key"))
    if kind is None or not key:
        return ()
    return (Attachment(kind, key, name=_s(content.get("file_name")),
                       size=_ms(content.get("file_size") or content.get("size")),
                       duration_ms=_ms(content.get("duration"))),)

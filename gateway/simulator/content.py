"""How Feishu judges the content of a message a bot sends (im/v1 create, reply, update).

Based on server-docs im-v1/message/create (error codes 230001, 230025, 230099) and
message-content-description/create_json (the content of each msg_type, post tags)."""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.simulator import config as c
from gateway.simulator.wire import ApiError

MSG_TYPES = frozenset({"text", "post", "image", "file", "audio", "media", "sticker",
                       "interactive", "share_chat", "share_user", "system"})
RICH_LIMITED = frozenset({"post", "interactive"})
"""30 KB for cards and posts, 150 KB for the rest (create docs, 230025)."""

POST_TAGS: dict[str, tuple[str, ...]] = {
    "text": ("text",), "a": ("text", "href"), "at": ("user_id",), "img": ("image_key",),
    "media": ("file_key",), "emotion": ("emoji_type",), "code_block": ("text",),
    "md": ("text",), "hr": (),
}
"""Each post tag and the string fields it requires."""
POST_ALONE = frozenset({"img", "media", "md"})
"""Tags that must be a paragraph of their own ("图片、视频元素必须是独立的一个段落"; "md 标签会
独占一个或多个段落，不能与其他标签在同一行")."""
_LOCALE = re.compile(r"^[a-z]{2}_[a-z]{2}$")


def invalid(detail: str) -> ApiError:
    """230001, as Feishu answers content it cannot parse (the detail plays the ext)."""
    return ApiError(c.CODE_INVALID_MESSAGE, f"invalid message content: {detail}")


def _check_paragraph(paragraph: object, where: str) -> int:
    if not isinstance(paragraph, list):
        raise invalid(f"{where} is not a list of elements")
    for n, element in enumerate(paragraph):
        at = f"{where}[{n}]"
        if not isinstance(element, dict):
            raise invalid(f"{at} is not an object")
        tag = element.get("tag")
        if not isinstance(tag, str) or tag not in POST_TAGS:
            raise invalid(f"{at} has an unknown tag {tag!r}")
        for key in POST_TAGS[tag]:
            if not isinstance(element.get(key), str):
                raise invalid(f"{at} ({tag}) needs a string {key}")
        if tag in POST_ALONE and len(paragraph) > 1:
            raise invalid(f"{at}: a {tag} element must be a paragraph of its own")
    return len(paragraph)


def check_post(parsed: dict[str, Any]) -> None:
    """A post: {locale: {"title"?: str, "content": [[element, ...], ...]}, ...} with at
    least one locale (zh_cn, en_us, ja_jp, ...) and something to show."""
    if not parsed:
        raise invalid("post needs at least one locale (zh_cn, en_us, ...)")
    shown = 0
    for locale, body in parsed.items():
        if not _LOCALE.match(locale) or not isinstance(body, dict):
            raise invalid(f"post key {locale!r} is not a locale object")
        title = body.get("title", "")
        if not isinstance(title, str):
            raise invalid(f"{locale}.title is not a string")
        paragraphs = body.get("content")
        if not isinstance(paragraphs, list):
            raise invalid(f"{locale}.content must be a list of paragraphs")
        shown += len(title) + sum(_check_paragraph(p, f"{locale}.content[{n}]")
                                  for n, p in enumerate(paragraphs))
    if not shown:
        raise invalid("post has neither a title nor any element")


def check_content(msg_type: str, content: str) -> dict[str, Any]:
    """Validate message content the way Feishu rejects it (bad JSON, missing text, a
    malformed post, size); returns it parsed."""
    if msg_type not in MSG_TYPES:
        raise ApiError(c.CODE_INVALID_MESSAGE, f"invalid msg_type: {msg_type}")
    try:
        parsed = json.loads(content)
    except json.JSONDecodeError as exc:
        raise invalid("not JSON") from exc
    if not isinstance(parsed, dict):
        raise invalid("not a JSON object")
    if msg_type == "text" and not isinstance(parsed.get("text"), str):
        raise invalid("text is required")
    if msg_type == "post":
        check_post(parsed)
    limit = c.CARD_LIMIT_BYTES if msg_type in RICH_LIMITED else c.TEXT_LIMIT_BYTES
    if len(content.encode("utf-8")) > limit:
        raise ApiError(c.CODE_CONTENT_TOO_LONG, f"message content exceeds {limit} bytes")
    return parsed


def card_reference(msg_type: str, parsed: dict[str, Any]) -> str | None:
    """The card entity an interactive message shows ({"type": "card", "data":
    {"card_id": ...}}), or None for a card given as JSON or a template."""
    if msg_type != "interactive" or parsed.get("type") != "card":
        return None
    data = parsed.get("data")
    card_id = data.get("card_id") if isinstance(data, dict) else None
    if not isinstance(card_id, str) or not card_id:
        raise ApiError(c.CODE_CARD_CONTENT, "Failed to create card content, ext=ErrCode: "
                       "11310; ErrMsg: cardid is invalid;")
    return card_id

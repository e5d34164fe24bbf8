"""Card JSON 2.0 as CardKit judges it: parse, validate, find elements, read the text. Pure.

Based on server-docs cardkit-v1/card/create and card/update (error codes 200220, 200860,
300301, 300302, 300303, 300305, 300307) and feishu-cards/card-json-v2-structure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gateway.simulator import config as c
from gateway.simulator.wire import ApiError

TEXT_TAGS = frozenset({"markdown", "plain_text"})
"""The elements whose text card-element/content streams (else 300310)."""


def nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every component or element (a dict with a string tag) under `node`, depth first."""
    if isinstance(node, list):
        for item in node:
            yield from nodes(item)
    elif isinstance(node, dict):
        if isinstance(node.get("tag"), str):
            yield node
        for value in node.values():
            if isinstance(value, (dict, list)):
                yield from nodes(value)


def card_size(card: dict[str, Any]) -> int:
    return len(json.dumps(card, ensure_ascii=False).encode("utf-8"))


def check_card(card: dict[str, Any]) -> None:
    """A JSON 2.0 card CardKit accepts, or the ApiError it answers."""
    if not card:
        raise ApiError(c.CODE_CARD_EMPTY, "The card DSL is empty")
    if card.get("schema") != "2.0":
        raise ApiError(c.CODE_CARD_SCHEMA, "Only schema 2.0 is supported")
    config = card.get("config", {})
    body = card.get("body", {})
    if not isinstance(config, dict) or not isinstance(body, dict):
        raise ApiError(c.CODE_CARD_GENERATE, "Failed to generate card content: config and "
                       "body must be objects")
    if config.get("update_multi") is False:
        raise ApiError(c.CODE_CARD_UPDATE_MULTI, "update_multi property is false")
    found = list(nodes(body))
    if len(found) > c.CARD_ELEMENTS_MAX:
        raise ApiError(c.CODE_CARD_TOO_MANY,
                       f"The number of card components exceeds {c.CARD_ELEMENTS_MAX}")
    seen: set[str] = set()
    for node in found:
        element_id = node.get("element_id")
        if isinstance(element_id, str):
            if element_id in seen:
                raise ApiError(c.CODE_CARD_DUPLICATE_ID,
                               f"Duplicate element_id in card component: {element_id}")
            seen.add(element_id)
    if card_size(card) > c.CARD_LIMIT_BYTES:
        raise ApiError(c.CODE_CARD_TOO_BIG, "Card content exceeds limit.")


def parse_card(data: object) -> dict[str, Any]:
    """The card a `card_json` data string holds, validated."""
    if not isinstance(data, str) or not data.strip():
        raise ApiError(c.CODE_CARD_EMPTY, "The card DSL is empty")
    if len(data.encode("utf-8")) > c.CARD_LIMIT_BYTES:
        raise ApiError(c.CODE_CARD_TOO_BIG, "Card content exceeds limit.")
    try:
        card = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ApiError(c.CODE_CARD_GENERATE,
                       f"Failed to generate card content: not JSON ({exc})") from exc
    if not isinstance(card, dict):
        raise ApiError(c.CODE_CARD_GENERATE, "Failed to generate card content: not an object")
    check_card(card)
    return card


def card_payload(value: object) -> dict[str, Any]:
    """The card of a {"type": "card_json", "data": "..."} object (create, full update)."""
    if not isinstance(value, dict):
        raise ApiError(c.CODE_CARD_PARAM, "Your request contains an invalid request "
                       "parameter: card is required")
    if value.get("type") != "card_json":
        raise ApiError(c.CODE_CARD_PARAM, "Your request contains an invalid request "
                       f"parameter: type={value.get('type')!r} (the simulator knows card_json)")
    return parse_card(value.get("data"))


def find_element(card: dict[str, Any], element_id: str) -> dict[str, Any] | None:
    return next((n for n in nodes(card.get("body")) if n.get("element_id") == element_id),
                None)


CONTROL_TAGS = frozenset({"button"})
"""Components whose label is a control, not what the card reads."""


def _texts(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict) and node.get("tag") in CONTROL_TAGS:
        return
    if isinstance(node, list):
        for item in node:
            yield from _texts(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("tag") in TEXT_TAGS and isinstance(node.get("content"), str):
        yield node
    for value in node.values():
        if isinstance(value, (dict, list)):
            yield from _texts(value)


def card_text(card: dict[str, Any]) -> str:
    """What the card reads: its header's texts, then every markdown and plain_text of its
    body (not a button's label), one per line."""
    parts = [n["content"] for part in (card.get("header"), card.get("body"))
             for n in _texts(part) if n["content"]]
    return "\n".join(parts)


def element_texts(card: dict[str, Any]) -> dict[str, str]:
    """The text of every markdown/plain_text element that has an element_id."""
    return {str(n["element_id"]): n["content"] for n in _texts(card.get("body"))
            if isinstance(n.get("element_id"), str)}

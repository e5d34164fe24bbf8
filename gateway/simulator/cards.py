"""The card entities (CardKit) the apps created: their current JSON, streaming mode,
sequence, and what was done to them. Thread-safe; shares the state's condition, so waits
on the state see card updates.

Rules, from server-docs cardkit-v1 (card/create, card/update, card/settings,
card-element/content) and feishu-cards/streaming-updates-openapi-overview:
- only the app that created a card may update or send it (300311); unknown card 200740;
- `sequence` strictly increases per card over every update call (else 300317);
- a uuid already used on the card makes the same call again a success that changes
  nothing; the uuid with another body is a conflict (200770);
- element text streams only in streaming mode (300309 when off, 200850 once it closed
  by itself, CARD_STREAMING_S after it was last turned on) and only into markdown and
  plain_text elements (300310);
- a card entity is sent once (im/v1 answers 230099, see `claim`);
- at most CARD_OPS_PER_S update calls per card in any second (feishu-cards streaming
  docs: 10 a second per card); a faster one is refused with Feishu's frequency-limit
  answer (HTTP 429, 99991400), and `busiest_second` measures the calls that came.
Not documented, chosen here: an unknown element answers 300313 "not find elementID" (as
Feishu was seen answering card batch updates); a rejected call does not use up its
sequence or uuid.
"""

from __future__ import annotations

import copy
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.simulator import cardjson as cj
from gateway.simulator import config as c
from gateway.simulator.wire import ApiError

_SENT_TWICE = ("Failed to create card content, ext=ErrCode: 11310; ErrMsg: cardid is "
               "invalid: the card entity was already sent (a card entity is sent once);")


@dataclass(frozen=True)
class CardView:
    """A card entity as it is now."""

    card_id: str
    app_id: str
    card: dict[str, Any]
    """Its current JSON 2.0, every update applied."""
    text: str
    """What it reads (header texts, then each markdown/plain_text), one per line."""
    elements: dict[str, str]
    """The text of each markdown/plain_text element with an element_id."""
    streaming_mode: bool
    sequence: int
    updates: int
    """Update calls that changed it (element text, settings, full update)."""
    rejected: int
    """Update calls answered with an error."""
    history: tuple[str, ...]
    """Its text when created and after each update."""
    busiest_second: int
    """The most update calls (refused ones included) that came within one second."""
    message_id: str | None
    """The message that shows it (None until sent)."""


@dataclass
class _Entity:
    card_id: str
    app_id: str
    card: dict[str, Any]
    streaming_until: float | None = None
    """Monotonic time streaming closes by itself; None when it is off."""
    sequence: int = 0
    message_id: str | None = None
    updates: int = 0
    rejected: int = 0
    history: list[str] = field(default_factory=list)
    uuids: dict[str, str] = field(default_factory=dict)
    calls: deque[float] = field(default_factory=deque)
    """When the update calls of the last second came (monotonic)."""
    busiest_second: int = 0

    def count_call(self, now: float) -> int:
        """Record an update call now; how many came within the last second, this one too."""
        while self.calls and self.calls[0] <= now - 1.0:
            self.calls.popleft()
        self.calls.append(now)
        self.busiest_second = max(self.busiest_second, len(self.calls))
        return len(self.calls)

    def streaming(self, now: float) -> bool:
        return self.streaming_until is not None and now < self.streaming_until


def _streaming_on(card: dict[str, Any]) -> bool:
    config = card.get("config")
    return isinstance(config, dict) and config.get("streaming_mode") is True


class CardStore:
    def __init__(self, cond: threading.Condition,
                 streaming_s: float = c.CARD_STREAMING_S) -> None:
        self._cond = cond
        self._streaming_s = streaming_s
        self._cards: dict[str, _Entity] = {}

    def _set_streaming(self, entity: _Entity, on: bool) -> None:
        entity.streaming_until = time.monotonic() + self._streaming_s if on else None

    def create(self, app_id: str, card: dict[str, Any]) -> str:
        with self._cond:
            card_id = str(random.randrange(7 * 10**18, 8 * 10**18))
            while card_id in self._cards:
                card_id = str(random.randrange(7 * 10**18, 8 * 10**18))
            entity = _Entity(card_id, app_id, card, history=[cj.card_text(card)])
            self._set_streaming(entity, _streaming_on(card))
            self._cards[card_id] = entity
            self._cond.notify_all()
            return card_id

    def _view(self, e: _Entity) -> CardView:
        return CardView(e.card_id, e.app_id, copy.deepcopy(e.card), cj.card_text(e.card),
                        cj.element_texts(e.card), e.streaming(time.monotonic()), e.sequence,
                        e.updates, e.rejected, tuple(e.history), e.busiest_second,
                        e.message_id)

    def view(self, card_id: str) -> CardView | None:
        with self._cond:
            entity = self._cards.get(card_id)
            return None if entity is None else self._view(entity)

    def views(self, app_id: str | None = None) -> list[CardView]:
        """Every card entity (of one app), in the order they were created."""
        with self._cond:
            return [self._view(e) for e in self._cards.values()
                    if app_id is None or e.app_id == app_id]

    def _owned(self, card_id: str, app_id: str) -> _Entity:
        entity = self._cards.get(card_id)
        if entity is None:
            raise ApiError(c.CODE_CARD_MISSING, "The card entity does not exist")
        if entity.app_id != app_id:
            raise ApiError(c.CODE_CARD_NOT_OWNER, "The current application does not have "
                           "permission to update/use this card")
        return entity

    def check_sendable(self, card_id: str, app_id: str, message_id: str | None = None) -> None:
        """ApiError 230099 unless `app_id` may send the card (as `message_id`)."""
        with self._cond:
            entity = self._cards.get(card_id)
            if entity is None:
                raise ApiError(c.CODE_CARD_CONTENT, "Failed to create card content, ext="
                               "ErrCode: 11310; ErrMsg: cardid is invalid;")
            if entity.app_id != app_id:
                raise ApiError(c.CODE_CARD_CONTENT, "Failed to create card content, ext="
                               f"ErrCode: {c.CODE_CARD_NOT_OWNER}; ErrMsg: The current "
                               "application does not have permission to update/use this card;")
            if entity.message_id is not None and entity.message_id != message_id:
                raise ApiError(c.CODE_CARD_CONTENT, _SENT_TWICE)

    def claim(self, card_id: str, app_id: str, message_id: str) -> None:
        """The card is sent as `message_id`: it cannot be sent again."""
        with self._cond:
            self.check_sendable(card_id, app_id, message_id)
            self._cards[card_id].message_id = message_id
            self._cond.notify_all()

    def set_streaming_s(self, seconds: float) -> None:
        """Streaming closes by itself this long after it was turned on (Feishu: 10
        minutes), for cards turned on from now."""
        with self._cond:
            self._streaming_s = seconds

    def expire_streaming(self, card_id: str) -> None:
        """Streaming closes by itself now, as it does CARD_STREAMING_S after it was turned
        on (text updates then get 200850); KeyError when unknown."""
        with self._cond:
            entity = self._cards[card_id]
            if entity.streaming_until is not None:
                entity.streaming_until = time.monotonic()
            self._cond.notify_all()

    def _mutate(self, card_id: str, app_id: str, sequence: int, uuid: str | None,
                body: dict[str, Any], apply: Callable[[_Entity], None]) -> None:
        fingerprint = json.dumps(body, sort_keys=True, ensure_ascii=False)
        with self._cond:
            entity = self._owned(card_id, app_id)
            try:
                if entity.count_call(time.monotonic()) > c.CARD_OPS_PER_S:
                    raise ApiError(c.CODE_CARD_RATE_LIMIT, "request trigger frequency limit",
                                   status=429)
                if uuid is not None and uuid in entity.uuids:
                    if entity.uuids[uuid] == fingerprint:
                        return  # the same call again: done already
                    raise ApiError(c.CODE_CARD_UUID_CONFLICT, "UUID conflict")
                if sequence <= entity.sequence:
                    raise ApiError(c.CODE_CARD_SEQUENCE, "The sequence number for operating "
                                   "on the card did not increment consecutively (last "
                                   f"{entity.sequence}, got {sequence})")
                apply(entity)
            except ApiError:
                entity.rejected += 1
                self._cond.notify_all()
                raise
            entity.sequence = sequence
            if uuid is not None:
                entity.uuids[uuid] = fingerprint
            entity.updates += 1
            entity.history.append(cj.card_text(entity.card))
            self._cond.notify_all()

    def set_text(self, card_id: str, app_id: str, element_id: str, text: str, *,
                 sequence: int, uuid: str | None) -> None:
        """card-element/content: the full text of a markdown/plain_text element."""
        def apply(entity: _Entity) -> None:
            if not entity.streaming(time.monotonic()):
                if entity.streaming_until is not None:
                    raise ApiError(c.CODE_CARD_STREAMING_TIMEOUT, "Card streaming timeout")
                raise ApiError(c.CODE_CARD_STREAMING_CLOSED, "Card streaming closed")
            card = copy.deepcopy(entity.card)
            element = cj.find_element(card, element_id)
            if element is None:
                raise ApiError(c.CODE_CARD_ELEMENT, "Failed to update element properties, "
                               f"ErrMsg: not find elementID : {element_id};")
            if element.get("tag") not in cj.TEXT_TAGS:
                raise ApiError(c.CODE_CARD_ONLY_TEXT, "Only update text")
            element["content"] = text
            if cj.card_size(card) > c.CARD_LIMIT_BYTES:
                raise ApiError(c.CODE_CARD_TOO_BIG, "Card content exceeds limit.")
            entity.card = card
        self._mutate(card_id, app_id, sequence, uuid,
                     {"op": "content", "element": element_id, "content": text}, apply)

    def set_settings(self, card_id: str, app_id: str, settings: dict[str, Any], *,
                     sequence: int, uuid: str | None) -> None:
        """card/settings: merge `config` (streaming_mode, ...) and `card_link` in."""
        def apply(entity: _Entity) -> None:
            config = settings.get("config", {})
            if not isinstance(config, dict):
                raise ApiError(c.CODE_CARD_SETTINGS, "Failed to update card configuration")
            card = copy.deepcopy(entity.card)
            merged = card.get("config")
            card["config"] = {**(merged if isinstance(merged, dict) else {}), **config}
            if "card_link" in settings:
                card["card_link"] = settings["card_link"]
            cj.check_card(card)
            entity.card = card
            if "streaming_mode" in config:
                self._set_streaming(entity, config["streaming_mode"] is True)
        self._mutate(card_id, app_id, sequence, uuid, {"op": "settings", **settings}, apply)

    def replace(self, card_id: str, app_id: str, card: dict[str, Any], *, sequence: int,
                uuid: str | None) -> None:
        """card/update: the whole card, its streaming mode included."""
        def apply(entity: _Entity) -> None:
            entity.card = card
            self._set_streaming(entity, _streaming_on(card))
        self._mutate(card_id, app_id, sequence, uuid, {"op": "update", "card": card}, apply)

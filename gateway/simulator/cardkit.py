"""aiohttp handlers for CardKit's card entities (cardkit/v1): create, stream an element's
text, change settings, replace the whole card.

Paths and bodies from server-docs cardkit-v1/card/create, card-element/content,
card/settings and card/update; the rules they enforce are in cards.py. Parameter errors
answer 10002 (the code these pages list for an invalid parameter)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.simulator import cardjson as cj
from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.callers import authorize
from gateway.simulator.state import SimState
from gateway.simulator.wire import ApiError, Handler, json_body, ok

BASE = "/open-apis/cardkit/v1/cards"
_INT32_MAX = 2**31 - 1


def _param(detail: str) -> ApiError:
    return ApiError(c.CODE_CARD_PARAM,
                    f"Your request contains an invalid request parameter: {detail}")


def _sequence(body: dict[str, Any]) -> int:
    value = body.get("sequence")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _INT32_MAX:
        raise _param("sequence must be an int32 from 1 to 2147483647")
    return value


def _uuid(body: dict[str, Any]) -> str | None:
    value = body.get("uuid")
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 64:
        raise _param("uuid must be a string of 1 to 64 characters")
    return value


class CardKitApi:
    """Every call acts as the app its Bearer token was issued to."""

    def __init__(self, apps: AppRegistry, state: SimState) -> None:
        self.apps, self.state = apps, state

    def routes(self, wrap: Callable[[Handler], Handler]) -> list[web.RouteDef]:
        """The routes, each handler passed through `wrap` (the send rate limit)."""
        return [
            web.post(BASE, wrap(self.create)),
            web.put(BASE + "/{card_id}/elements/{element_id}/content", wrap(self.content)),
            web.patch(BASE + "/{card_id}/settings", wrap(self.settings)),
            web.put(BASE + "/{card_id}", wrap(self.update)),
        ]

    async def create(self, request: web.Request) -> web.Response:
        app = authorize(request, self.apps, self.state)
        card = cj.card_payload(await json_body(request))
        return ok({"card_id": self.state.cards.create(app.app_id, card)})

    async def content(self, request: web.Request) -> web.Response:
        app = authorize(request, self.apps, self.state)
        body = await json_body(request)
        text = body.get("content")
        if not isinstance(text, str) or not 1 <= len(text) <= c.CARD_TEXT_MAX_CHARS:
            raise _param(f"content must be a string of 1 to {c.CARD_TEXT_MAX_CHARS} characters")
        self.state.cards.set_text(request.match_info["card_id"], app.app_id,
                                  request.match_info["element_id"], text,
                                  sequence=_sequence(body), uuid=_uuid(body))
        return ok({})

    async def settings(self, request: web.Request) -> web.Response:
        app = authorize(request, self.apps, self.state)
        body = await json_body(request)
        raw = body.get("settings")
        try:
            settings = json.loads(raw) if isinstance(raw, str) else None
        except json.JSONDecodeError as exc:
            raise _param(f"settings is not JSON ({exc})") from exc
        if not isinstance(settings, dict):
            raise _param("settings must be a JSON object in a string")
        self.state.cards.set_settings(request.match_info["card_id"], app.app_id, settings,
                                      sequence=_sequence(body), uuid=_uuid(body))
        return ok({})

    async def update(self, request: web.Request) -> web.Response:
        app = authorize(request, self.apps, self.state)
        body = await json_body(request)
        card = cj.card_payload(body.get("card"))
        self.state.cards.replace(request.match_info["card_id"], app.app_id, card,
                                 sequence=_sequence(body), uuid=_uuid(body))
        return ok({})

"""What every open-API handler shares: Feishu-style errors and replies, JSON bodies."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.simulator import config as c

Handler = Callable[[web.Request], Awaitable[web.Response]]


class ApiError(Exception):
    """A Feishu-style error reply: HTTP status plus {"code", "msg"}."""

    def __init__(self, code: int, msg: str, status: int = 400) -> None:
        super().__init__(f"{code} {msg}")
        self.code, self.msg, self.status = code, msg, status

    def response(self) -> web.Response:
        return web.json_response({"code": self.code, "msg": self.msg, "data": {}},
                                 status=self.status)


def ok(data: dict[str, Any], msg: str = "success") -> web.Response:
    return web.json_response({"code": 0, "msg": msg, "data": data})


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or ApiError 9499 when it is not one."""
    raw = await request.read()
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(c.CODE_BAD_REQUEST, f"Bad Request: invalid JSON body ({exc})") from exc
    if not isinstance(body, dict):
        raise ApiError(c.CODE_BAD_REQUEST, "Bad Request: body must be a JSON object")
    return body


async def peek_uuid(request: web.Request) -> str | None:
    """The body's uuid, if any; never fails (the handler validates the body later)."""
    try:
        body = json.loads((await request.read()).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    uuid = body.get("uuid") if isinstance(body, dict) else None
    return uuid if isinstance(uuid, str) and uuid else None


def require_str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(c.CODE_FIELD_VALIDATION, f"field validation failed: {key} is required")
    return value


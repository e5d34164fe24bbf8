"""The app behind an open-API call: the one its tenant token was issued to, and the
frequency limit (ratelimit.py) each sending call of that app passes first."""

from __future__ import annotations

from aiohttp import web

from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.config import SimConfig
from gateway.simulator.faults import rate_limit_response
from gateway.simulator.state import SimState
from gateway.simulator.wire import ApiError, Handler


def bearer_app(request: web.Request, apps: AppRegistry, state: SimState) -> SimConfig | None:
    """The app whose current tenant token the request carries, or None."""
    header = request.headers.get("Authorization", "")
    token = header.removeprefix("Bearer ") if header.startswith("Bearer ") else ""
    return apps.by_token(token, state.token_generation) if token else None


def authorize(request: web.Request, apps: AppRegistry, state: SimState) -> SimConfig:
    """The app whose current tenant token the request carries, or ApiError 99991663."""
    app = bearer_app(request, apps, state)
    if app is None:
        raise ApiError(c.CODE_INVALID_TOKEN, "Invalid access token for authorization. "
                       "Please make a request with token attached.")
    return app


def limit_sends(handler: Handler, apps: AppRegistry, state: SimState) -> Handler:
    """`handler` behind the app's frequency limit; a call without a valid token goes on
    (its handler answers 99991663)."""
    async def limited(request: web.Request) -> web.Response:
        app = bearer_app(request, apps, state)
        verdict = None if app is None else state.limiter.admit(app.app_id)
        if verdict is not None:
            return rate_limit_response(429, limit=verdict[0], reset_s=verdict[1])
        return await handler(request)
    return limited

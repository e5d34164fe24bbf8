"""The synchronous, thread-safe façade: a fake Feishu running on its own loop and thread."""

from __future__ import annotations

from aiohttp import web

from gateway.simulator.chat_events import ChatEventDelivery
from gateway.simulator.controls import Controls
from gateway.simulator.userapi import user_routes


class Simulator(ChatEventDelivery, Controls):
    """A fake Feishu open platform on loopback for the real lark-oapi SDK.

    Events are delivered to exactly one connected client of the event's app (the primary
    app, the constructor's, unless a call names another one added with `add_app`),
    round-robin. When no such client is connected, a send waits up to `delivery_timeout_s`
    for one, then raises TimeoutError.

    An event none of whose frames got an ACK with code 200 (in webhook mode: whose push got
    no HTTP 200) is redelivered in the background as a new frame (same payload, same
    event_id) on Feishu's schedule, `redelivery_s`: 15 s after the first try, then 5 min,
    1 h and 6 h after the one before, then never (a test passes a shorter one; `()`:
    never). A redelivery goes to a client of its app connected then; with none, that try
    is lost, as Feishu's is (`missed_redeliveries`).

    Card callbacks are judged against `card_answer_limit_ms` (Feishu: 3 s), see
    `card_response`.
    """

    def _user_routes(self) -> list[web.RouteDef]:
        return user_routes(self)

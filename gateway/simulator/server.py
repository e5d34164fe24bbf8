"""The aiohttp app: the ws endpoint route, the /ws/v2 long connection, and event delivery."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from gateway.feishu.ws import frames
from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.faults import FaultPlan
from gateway.simulator.listing import Listing
from gateway.simulator.openapi import OpenApi
from gateway.simulator.records import Ack, card_response, raw_card
from gateway.simulator.state import SimState
from gateway.simulator.wire import ApiError, json_body

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AckListener = Callable[[str, int], None]


class NoBotConnected(TimeoutError):
    """No client of the event's app (a listener, an SDK client) connected in time."""


@dataclass(eq=False)
class _Conn:
    ws: web.WebSocketResponse
    transport: asyncio.Transport | None
    device_id: str
    app_id: str
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed_by_server: bool = False
    silent: bool = False


async def _linger(conn: _Conn) -> None:
    """Keep a silent connection's TCP open, answering nothing, until the client drops it
    (or the simulator aborts it)."""
    while conn.transport is not None and not conn.transport.is_closing():
        await asyncio.sleep(0.05)


class Hub:
    """Long-connection side: hands out ws URLs, tracks clients, delivers frames round-robin
    among the live (not silent) connections of the event's app."""

    def __init__(self, apps: AppRegistry, state: SimState,
                 card_limit_ms: float = c.CARD_ANSWER_LIMIT_MS) -> None:
        self.apps, self.state = apps, state
        self.config = apps.primary  # service id and ClientConfig are shared by every app
        self.card_limit_ms = card_limit_ms
        self.endpoint_available = True
        self.endpoint_refusal_code: int | None = None
        self.ack_listener: AckListener | None = None
        self._conns: list[_Conn] = []
        self._silent: list[_Conn] = []
        self._changed = asyncio.Condition()
        self._next = 0
        self._device_ids: dict[str, str] = {}
        self._seq = itertools.count(1)

    async def endpoint(self, request: web.Request) -> web.Response:
        """POST /callback/ws/endpoint: credentials in, ws URL and ClientConfig out."""
        if not self.endpoint_available:
            return web.json_response({"code": c.CODE_SYSTEM_BUSY, "msg": "system busy"},
                                     status=503)
        if self.endpoint_refusal_code is not None:
            return web.json_response({"code": self.endpoint_refusal_code,
                                      "msg": "connection refused by the platform"})
        body = await json_body(request)
        app = self.apps.find(body.get("AppID"))
        if app is None or body.get("AppSecret") != app.app_secret:
            # Any code other than 1 / 1000040343 is fatal for the SDK: it stops retrying.
            return web.json_response({"code": c.CODE_INVALID_PARAM,
                                      "msg": "invalid app credentials"})
        device_id = uuid.uuid4().hex
        self._device_ids[device_id] = app.app_id
        url = (f"ws://{request.host}/ws/v2?device_id={device_id}"
               f"&service_id={self.config.service_id}")
        data = {"URL": url, "ClientConfig": self.config.client_config()}
        return web.json_response({"code": 0, "msg": "ok", "data": data})

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        """GET /ws/v2: one SDK long connection, bound to the app of its device_id."""
        device_id = request.query.get("device_id", "")
        service_id = request.query.get("service_id", "")
        app_id = self._device_ids.get(device_id)
        if app_id is None or service_id != str(self.config.service_id):
            headers = {"handshake-status": "403", "handshake-msg": "unknown device_id"}
            return web.Response(status=403, headers=headers)
        # Pings and close frames are answered by _serve, so a silent connection answers none.
        ws = web.WebSocketResponse(compress=False, timeout=2.0, autoping=False, autoclose=False)
        await ws.prepare(request)
        conn = _Conn(ws, request.transport, device_id, app_id)
        await self._add(conn)
        code: int | None = None
        try:
            code = await self._serve(conn)
        finally:
            self.state.record_close(None if conn.closed_by_server else code)
            await self._remove(conn)
        return ws

    async def _serve(self, conn: _Conn) -> int | None:
        """Read the connection until it ends; returns the close code the client sent, None
        when it sent no close frame. A silent connection is still read, to see how it ends,
        but nothing it sends is answered or acted on."""
        ws = conn.ws
        while True:
            msg = await ws.receive()
            if msg.type == WSMsgType.BINARY:
                if not conn.silent:
                    await self._on_frame(conn, msg.data)
            elif msg.type == WSMsgType.PING:
                if not conn.silent:
                    with contextlib.suppress(ConnectionError):
                        await ws.pong(msg.data)
            elif msg.type == WSMsgType.CLOSE:
                if conn.silent:
                    await _linger(conn)
                else:
                    await ws.close(drain=False)
                return int(msg.data)
            elif msg.type in (WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return None
            elif msg.type != WSMsgType.PONG:
                logger.warning("ignoring non-binary ws message of type %s", msg.type)

    async def _on_frame(self, conn: _Conn, data: bytes) -> None:
        try:
            frame = frames.parse_frame(data)
        except ValueError:
            logger.warning("client sent an undecodable frame (%d bytes)", len(data))
            return
        if frame.method == frames.METHOD_CONTROL and frame.frame_type == "ping":
            pong = frames.build_pong(frame.service, self.config.client_config())
            try:
                async with conn.send_lock:
                    if not conn.silent:
                        await conn.ws.send_bytes(pong)
            except ConnectionError as exc:
                logger.info("could not answer a ping: %s", exc)
        elif frame.method == frames.METHOD_DATA:
            self._on_ack(frame)
        else:
            logger.warning("ignoring control frame of type %r", frame.frame_type)

    def _on_ack(self, frame: frames.ParsedFrame) -> None:
        frame_id = frame.headers.get(frames.HEADER_MESSAGE_ID, "")
        try:
            ack = frames.parse_ack_payload(frame.payload)
        except ValueError as exc:
            logger.warning("malformed ACK for frame %s: %s", frame_id, exc)
            return
        biz_rt = frame.headers.get(frames.HEADER_BIZ_RT)
        self.answered(frame_id, ack.code, ack.data,
                      int(biz_rt) if biz_rt and biz_rt.isdigit() else None)

    def answered(self, frame_id: str, code: int, data: dict[str, Any] | None,
                 biz_rt_ms: int | None) -> None:
        """A frame's answer (an ACK, or a webhook push's HTTP answer): recorded, a card
        callback's card applied, the redeliverer told."""
        recorded = self.state.record_ack(frame_id, code, data, biz_rt_ms)
        logger.debug("ACK %s code=%s latency=%.1f ms", frame_id, code, recorded.latency_ms)
        sent = self.state.find_frame(frame_id)
        if sent is not None and sent.card_message_id is not None:
            self._apply_card_answer(sent.card_message_id, recorded)
        if self.ack_listener is not None:
            self.ack_listener(frame_id, code)

    def _apply_card_answer(self, message_id: str, ack: Ack) -> None:
        """As Feishu does: an in-time answer carrying a raw card replaces the clicked card."""
        card = raw_card(card_response(ack, self.card_limit_ms))
        if card is not None and self.state.get_message(message_id) is not None:
            self.state.edit_message(message_id, "interactive",
                                    json.dumps(card, ensure_ascii=False))

    def _publish(self) -> None:
        per_app = Counter(x.app_id for x in self._conns)
        self.state.set_connections(dict(per_app), len(self._silent))

    async def _add(self, conn: _Conn) -> None:
        async with self._changed:
            self._conns.append(conn)
            self._publish()
            self._changed.notify_all()

    async def _remove(self, conn: _Conn) -> None:
        async with self._changed:
            for conns in (self._conns, self._silent):
                if conn in conns:
                    conns.remove(conn)
            self._publish()

    async def _pick(self, deadline: float | None, app_id: str | None) -> _Conn:
        loop = asyncio.get_running_loop()
        async with self._changed:
            while not (live := [x for x in self._conns if not x.ws.closed
                                and (app_id is None or x.app_id == app_id)]):
                remaining = None if deadline is None else max(deadline - loop.time(), 0)
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    raise NoBotConnected(
                        f"simulator: no bot of app {app_id or '*'} is connected to take the "
                        "event (is a listener's FEISHU_DOMAIN the simulator's url?)") from None
            conn = live[self._next % len(live)]
            self._next += 1
            return conn

    async def deliver(self, payload: bytes, *, frame_id: str, frame_type: str, parts: int,
                      timeout_s: float | None, app_id: str | None = None) -> None:
        """Send one event as `parts` frames to one live client of `app_id` (None: of any
        app), waiting up to timeout_s (None: forever) for one to be connected."""
        now = asyncio.get_running_loop().time()
        deadline = None if timeout_s is None else now + timeout_s
        data = frames.build_data_frames(
            payload, frame_message_id=frame_id, trace_id=uuid.uuid4().hex,
            service=self.config.service_id, seq_id=next(self._seq),
            log_id=uuid.uuid4().int >> 65, frame_type=frame_type, parts=parts)
        while True:
            conn = await self._pick(deadline, app_id)
            try:
                async with conn.send_lock:
                    if conn.silent:
                        continue  # it went silent meanwhile: pick another
                    self.state.mark_sent(frame_id)
                    for item in data:
                        await conn.ws.send_bytes(item)
                return
            except ConnectionError as exc:
                logger.info("delivery of %s failed (%s); trying another connection", frame_id, exc)
                await self._remove(conn)

    async def go_silent(self, app_id: str | None = None) -> int:
        """Every open connection (of one app) turns into a zombie: kept open, never read
        from, answered or delivered to again. Returns how many went silent."""
        async with self._changed:
            chosen = [x for x in self._conns if not x.ws.closed
                      and (app_id is None or x.app_id == app_id)]
            for conn in chosen:
                conn.silent = True
                self._conns.remove(conn)
            self._silent.extend(chosen)
            self._publish()
        return len(chosen)

    async def drop_all(self) -> int:
        """Abort every connection, silent ones included, without a close frame; returns
        how many were dropped."""
        async with self._changed:
            conns = [*self._conns, *self._silent]
            self._conns, self._silent = [], []
            self._publish()
        for conn in conns:
            conn.closed_by_server = True
            if conn.transport is not None:
                conn.transport.abort()
        return len(conns)

    async def close_all(self) -> None:
        """Close every live connection with a close frame (going away); abort silent ones."""
        conns, silent = list(self._conns), list(self._silent)
        for conn in (*conns, *silent):
            conn.closed_by_server = True
        for conn in silent:
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.gather(*(x.ws.close(code=WSCloseCode.GOING_AWAY, message=b"bye")
                               for x in conns), return_exceptions=True)


def build_app(apps: AppRegistry, state: SimState, faults: FaultPlan | None = None, *,
              card_limit_ms: float = c.CARD_ANSWER_LIMIT_MS,
              listing: Listing | None = None) -> tuple[web.Application, Hub]:
    """The aiohttp application with every route, plus the hub that owns the connections."""
    hub = Hub(apps, state, card_limit_ms)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        state.record_request(request.path)
        try:
            return await handler(request)
        except ApiError as err:
            return err.response()
        except web.HTTPException:
            raise
        except ConnectionError as error:  # the client went away mid-request: nothing wrong
            logger.info("simulator: %s %s: the client went away (%s)", request.method,
                        request.path, error)
            return web.Response(status=400, text="the client went away")
        except Exception:
            logger.exception("simulator handler failed: %s %s", request.method, request.path)
            return web.json_response({"code": 1, "msg": "simulator internal error"}, status=500)

    app = web.Application(middlewares=[guard])
    app.router.add_post("/callback/ws/endpoint", hub.endpoint)
    app.router.add_get("/ws/v2", hub.websocket)
    app.router.add_routes(OpenApi(apps, state, faults, listing).routes())
    return app, hub

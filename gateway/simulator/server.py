"""The aiohttp app: the ws endpoint route, the /ws/v2 long connection, and event delivery."""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import WSCloseCode, WSMsgType, web

from gateway.feishu import frames
from gateway.simulator import config as c
from gateway.simulator.config import SimConfig
from gateway.simulator.faults import FaultPlan
from gateway.simulator.openapi import ApiError, OpenApi, json_body
from gateway.simulator.state import SimState

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AckListener = Callable[[str, int], None]


@dataclass(eq=False)
class _Conn:
    ws: web.WebSocketResponse
    transport: asyncio.Transport | None
    device_id: str
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed_by_server: bool = False


class Hub:
    """Long-connection side: hands out ws URLs, tracks clients, delivers frames round-robin."""

    def __init__(self, config: SimConfig, state: SimState) -> None:
        self.config, self.state = config, state
        self.endpoint_available = True
        self.endpoint_refusal_code: int | None = None
        self.ack_listener: AckListener | None = None
        self._conns: list[_Conn] = []
        self._changed = asyncio.Condition()
        self._next = 0
        self._device_ids: set[str] = set()
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
        if (body.get("AppID"), body.get("AppSecret")) != (self.config.app_id,
                                                          self.config.app_secret):
            # Any code other than 1 / 1000040343 is fatal for the SDK: it stops retrying.
            return web.json_response({"code": c.CODE_INVALID_PARAM,
                                      "msg": "invalid app credentials"})
        device_id = uuid.uuid4().hex
        self._device_ids.add(device_id)
        url = (f"ws://{request.host}/ws/v2?device_id={device_id}"
               f"&service_id={self.config.service_id}")
        data = {"URL": url, "ClientConfig": self.config.client_config()}
        return web.json_response({"code": 0, "msg": "ok", "data": data})

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        """GET /ws/v2: one SDK long connection."""
        device_id = request.query.get("device_id", "")
        service_id = request.query.get("service_id", "")
        if device_id not in self._device_ids or service_id != str(self.config.service_id):
            headers = {"handshake-status": "403", "handshake-msg": "unknown device_id"}
            return web.Response(status=403, headers=headers)
        ws = web.WebSocketResponse(compress=False, timeout=2.0)
        await ws.prepare(request)
        conn = _Conn(ws, request.transport, device_id)
        await self._add(conn)
        client_closed = False
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    await self._on_frame(conn, msg.data)
                else:
                    logger.warning("ignoring non-binary ws message of type %s", msg.type)
            client_closed = ws.close_code is not None and not conn.closed_by_server
        finally:
            self.state.record_close(ws.close_code if client_closed else None)
            await self._remove(conn)
        return ws

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
        recorded = self.state.record_ack(
            frame_id, ack.code, ack.data, int(biz_rt) if biz_rt and biz_rt.isdigit() else None)
        logger.debug("ACK %s code=%s latency=%.1f ms", frame_id, ack.code, recorded.latency_ms)
        if self.ack_listener is not None:
            self.ack_listener(frame_id, ack.code)

    async def _add(self, conn: _Conn) -> None:
        async with self._changed:
            self._conns.append(conn)
            self.state.set_connection_count(len(self._conns))
            self._changed.notify_all()

    async def _remove(self, conn: _Conn) -> None:
        async with self._changed:
            if conn in self._conns:
                self._conns.remove(conn)
            self.state.set_connection_count(len(self._conns))

    async def _pick(self, deadline: float | None) -> _Conn:
        loop = asyncio.get_running_loop()
        async with self._changed:
            while not (live := [x for x in self._conns if not x.ws.closed]):
                remaining = None if deadline is None else max(deadline - loop.time(), 0)
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    raise TimeoutError(
                        "simulator: no long-connection client connected to deliver the event "
                        "(is the lark.ws.Client started with domain=sim.url?)") from None
            conn = live[self._next % len(live)]
            self._next += 1
            return conn

    async def deliver(self, payload: bytes, *, frame_id: str, frame_type: str, parts: int,
                      timeout_s: float | None) -> None:
        """Send one event as `parts` frames to one client, waiting up to timeout_s (None:
        forever) for one to be connected."""
        now = asyncio.get_running_loop().time()
        deadline = None if timeout_s is None else now + timeout_s
        data = frames.build_data_frames(
            payload, frame_message_id=frame_id, trace_id=uuid.uuid4().hex,
            service=self.config.service_id, seq_id=next(self._seq),
            log_id=uuid.uuid4().int >> 65, frame_type=frame_type, parts=parts)
        while True:
            conn = await self._pick(deadline)
            try:
                async with conn.send_lock:
                    for item in data:
                        await conn.ws.send_bytes(item)
                return
            except ConnectionError as exc:
                logger.info("delivery of %s failed (%s); trying another connection", frame_id, exc)
                await self._remove(conn)

    async def drop_all(self) -> int:
        """Abort every connection without a close frame; returns how many were dropped."""
        async with self._changed:
            conns, self._conns = self._conns, []
            self.state.set_connection_count(0)
        for conn in conns:
            conn.closed_by_server = True
            if conn.transport is not None:
                conn.transport.abort()
        return len(conns)

    async def close_all(self) -> None:
        """Close every connection with a close frame (going away)."""
        conns = list(self._conns)
        for conn in conns:
            conn.closed_by_server = True
        await asyncio.gather(*(x.ws.close(code=WSCloseCode.GOING_AWAY, message=b"bye")
                               for x in conns), return_exceptions=True)


def build_app(config: SimConfig, state: SimState,
              faults: FaultPlan | None = None) -> tuple[web.Application, Hub]:
    """The aiohttp application with every route, plus the hub that owns the connections."""
    hub = Hub(config, state)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        state.record_request(request.path)
        try:
            return await handler(request)
        except ApiError as err:
            return err.response()
        except web.HTTPException:
            raise
        except Exception:
            logger.exception("simulator handler failed: %s %s", request.method, request.path)
            return web.json_response({"code": 1, "msg": "simulator internal error"}, status=500)

    app = web.Application(middlewares=[guard])
    app.router.add_post("/callback/ws/endpoint", hub.endpoint)
    app.router.add_get("/ws/v2", hub.websocket)
    app.router.add_routes(OpenApi(config, state, faults).routes())
    return app, hub

"""The webhook server: Feishu POSTs each event and card callback to one request URL; a push
is checked (verify.py), then its one Redis step (the listener's intake, the same as the long
connection's) runs on a bounded pool of threads off the event loop, and only then is it
answered: 200 with the callback's answer (`{}` for an event), 500 when the step failed
(Feishu pushes it again: 15 s, 5 min, 1 h, 6 h later), 401 for a refused push, 413 for a body
over the cap, 503 when the pool's queue is full.

Card callbacks (a Stop or approval click, which Feishu wants answered within 3 s) have a
small pool and queue of their own, so a burst of events queued for the Redis step never
makes a click wait or be refused.

The aiohttp server runs on an asyncio loop on a thread of its own, like the long connections;
`statuses()` gives one record per app for `feishu-gateway status` and `health`."""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.core import metrics
from gateway.core.errors import GatewayError
from gateway.core.presence import STOPPED
from gateway.feishu.gate import Gate, Shed
from gateway.feishu.webhook.crypto import warm
from gateway.feishu.webhook.verify import Challenge, Keys, PushRefused, Signed, open_push
from gateway.feishu.ws.connection import ConnectionStatus

logger = logging.getLogger(__name__)

PushHandler = Callable[[str, str, bytes], Mapping[str, Any] | None]
"""(app_id, "event", plaintext payload) → the callback's answer; raising means 500."""
SERVING = "serving"
"""The state of an app whose pushes this server takes (`status`, `health`)."""
QUEUE_PER_THREAD = 4
CALLBACK_THREADS = 2
SHUTDOWN_S = 5.0


@dataclass(frozen=True)
class ServerOptions:
    addr: str
    port: int
    path: str
    max_body_bytes: int
    concurrency: int
    ingest_wait_max_s: float = 0.0


@dataclass
class _Lane:
    """A pool for the Redis steps of one kind of push, how many may wait on it, and its
    gate (gateway/feishu/gate.py; only the server's loop touches the counts)."""

    executor: ThreadPoolExecutor
    cap: int
    gate: Gate

    @property
    def in_flight(self) -> int:
        return self.gate.in_flight


class WebhookServer:
    """Serves the request URL until `stop()`; `fatal` is never set (a port that cannot be
    bound fails `start()` instead)."""

    def __init__(self, keys: Keys, options: ServerOptions, handler: PushHandler, *,
                 apps: Sequence[str], now_s: Callable[[], float]) -> None:
        self.keys, self.options = keys, options
        self._handler, self._now_s = handler, now_s
        self._primary = apps[0]
        self._statuses = {app_id: ConnectionStatus(app_id, SERVING, since=time.monotonic())
                          for app_id in apps}
        events = ThreadPoolExecutor(options.concurrency,
                                    thread_name_prefix="gateway-webhook-ingest")
        callbacks = ThreadPoolExecutor(CALLBACK_THREADS,
                                       thread_name_prefix="gateway-webhook-callback")
        self._lanes = {  # (the gate's step time is per thread: its wait bound, per pool)
            False: _Lane(events, options.concurrency * (1 + QUEUE_PER_THREAD),
                         Gate(events, options.ingest_wait_max_s, "webhook events")),
            True: _Lane(callbacks, CALLBACK_THREADS * (1 + QUEUE_PER_THREAD),
                        Gate(callbacks, options.ingest_wait_max_s, "webhook callbacks")),
        }
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway-webhook",
                                        daemon=True)
        self.fatal: str | None = None
        self.port = options.port

    def statuses(self) -> list[ConnectionStatus]:
        return list(self._statuses.values())

    @property
    def events_waiting(self) -> int:
        """Events taken and not answered yet (their Redis step runs or waits for a thread)."""
        return self._lanes[False].in_flight

    def start(self) -> WebhookServer:
        """Bind now (GatewayError in one line when the address cannot be), then serve."""
        o = self.options
        if self.keys.encrypt_key:
            warm()
        try:
            sock = socket.create_server((o.addr, o.port), reuse_port=False)
        except OSError as error:
            raise GatewayError(f"cannot serve the webhook on {o.addr}:{o.port} "
                               f"(FEISHU_WEBHOOK_ADDR, FEISHU_WEBHOOK_PORT): "
                               f"{error.strerror or error}") from None
        self.port = int(sock.getsockname()[1])
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(sock), self._loop).result(10.0)
        return self

    async def _serve(self, sock: socket.socket) -> None:
        app = web.Application(client_max_size=self.options.max_body_bytes)
        app.router.add_post(self.options.path, self._push)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_S,
                                     handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _push(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        try:
            if (request.content_length or 0) > self.options.max_body_bytes:
                raise web.HTTPRequestEntityTooLarge(max_size=self.options.max_body_bytes,
                                                    actual_size=request.content_length or 0)
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            logger.warning("push from %s refused: a body over FEISHU_WEBHOOK_MAX_BODY_BYTES "
                           "(%d)", request.remote, self.options.max_body_bytes)
            return web.json_response({"msg": "body too large"}, status=413)
        try:
            opened = open_push(body, Signed.of(request.headers), self.keys, self._now_s())
        except PushRefused as refusal:
            logger.warning("push from %s refused: %s", request.remote, refusal)
            return web.json_response({"msg": "refused"}, status=401)
        if isinstance(opened, Challenge):
            logger.info("URL verification answered (the request URL is %s)", request.path)
            return web.json_response({"challenge": opened.challenge})
        app_id = opened.app_id or self._primary
        status = self._statuses.get(app_id)
        if status is None:
            logger.warning("push from %s refused: for app %s, which this gateway does not "
                           "serve (FEISHU_APP_ID, FEISHU_APPS)", request.remote, app_id)
            return web.json_response({"msg": "refused"}, status=401)
        lane = self._lanes[opened.is_callback]
        if lane.in_flight >= lane.cap:
            logger.warning("push answered 503: %d %s wait for the Redis step "
                           "(FEISHU_WEBHOOK_CONCURRENCY); Feishu pushes it again", lane.cap,
                           "callbacks" if opened.is_callback else "events")
            return web.json_response({"msg": "busy"}, status=503)
        status.last_frame_at = status.last_event_at = arrived
        return await self._take(lane, app_id, opened.payload, arrived)

    async def _take(self, lane: _Lane, app_id: str, payload: bytes,
                    arrived: float) -> web.Response:
        """The intake's step off the loop, then the answer."""
        try:
            taken = await lane.gate.step(functools.partial(self._handler, app_id, "event",
                                                           payload))
            answer, code = (None, 503) if isinstance(taken, Shed) else (taken, 200)
        except GatewayError as error:
            logger.error("push not taken (%s): answered 500, Feishu pushes it again", error)
            answer, code = None, 500
        except Exception:  # the push handler's boundary: the server goes on
            logger.exception("push failed: answered 500, Feishu pushes it again")
            answer, code = None, 500
        metrics.acked(time.monotonic() - arrived, code)
        return web.json_response(dict(answer or {}), status=code)

    def stop(self) -> None:
        """No new pushes; those in progress finish (within SHUTDOWN_S), then the pool."""
        if self._thread.is_alive():
            runner = self._runner
            if runner is not None:
                try:
                    asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(
                        SHUTDOWN_S + 2.0)
                except (TimeoutError, RuntimeError) as error:
                    logger.warning("webhook server did not stop in time (%r)", error)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()
        for lane in self._lanes.values():
            lane.executor.shutdown(wait=True, cancel_futures=True)
        for status in self._statuses.values():
            status.state, status.since = STOPPED, time.monotonic()

"""The webhook server: Feishu POSTs each event and card callback to one request URL; a push
is read (its head within FEISHU_WEBHOOK_KEEPALIVE_S, its body within READ_TIMEOUT_S, within
READ_BUDGET_BYTES being read at once), checked (verify.py), then its
one Redis step (the listener's intake, the same as the long connection's) runs on a bounded
pool of threads off the event loop, and only then is it answered: 200 with the callback's
answer (`{}` for an event), 500 when the step failed (Feishu pushes it again: 15 s, 5 min,
1 h, 6 h later), 401 for a refused push, 413 for a body over the cap, 408 for one not read
in time, 503 when the push could not begin its step in time (gateway/feishu/gate.py) or the
pool's queue is full.

An event refused for want of time, or because its step could not take it now (`TakeLater`:
Redis, the broker, the bot's identity), is handed to `keep` (gateway/listener/refused.py):
a step of its own (`take_kept`) takes the kept events 0.2 s later, at once again while it
takes some, backing off to 5 s while none can be taken; meanwhile a push of a chat with an
event kept is refused and kept behind it. Pushes of one chat begin their steps in the order
they arrived (order.py), so a later one is never admitted first.

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
from gateway.core.errors import GatewayError, TakeLater
from gateway.core.logs import Tally
from gateway.core.presence import STOPPED
from gateway.core.webhook_settings import KEEPALIVE_S
from gateway.feishu.gate import LATER_RETRY_S, Gate, Shed
from gateway.feishu.webhook.crypto import warm
from gateway.feishu.webhook.order import ChatOrder, chat_key
from gateway.feishu.webhook.verify import Challenge, Keys, PushRefused, Signed, open_push
from gateway.feishu.ws.connection import ConnectionStatus

logger = logging.getLogger(__name__)

PushHandler = Callable[[str, str, bytes], Mapping[str, Any] | None]
"""(app_id, "event", plaintext payload) → the callback's answer; raising means 500
(TakeLater: the push is kept to take later, as it is while an event of its chat is)."""
SERVING = "serving"
"""The state of an app whose pushes this server takes (`status`, `health`)."""
QUEUE_PER_THREAD = 4
CALLBACK_THREADS = 2
SHUTDOWN_S = 5.0
READ_TIMEOUT_S = 5.0
"""A request's body is read within this (Feishu gives up on a push after 3 s)."""
READ_BUDGET_BYTES = 64 * 1024 * 1024
"""The bytes of request bodies read at once (each counted by its Content-Length, or as
FEISHU_WEBHOOK_MAX_BODY_BYTES without one): a push past it is answered 503 unread, so slow
or stalled bodies pin at most this much (Feishu's pushes are a few KB: thousands at once)."""


def closing(answer: dict[str, str], status: int) -> web.Response:
    """An answer after which its connection is closed, its request's body unread (aiohttp
    closes it only when told so: a `Connection: close` header alone leaves it open)."""
    response = web.json_response(answer, status=status)
    response.force_close()
    return response


@dataclass(frozen=True)
class ServerOptions:
    addr: str
    port: int
    path: str
    max_body_bytes: int
    concurrency: int
    ingest_wait_max_s: float = 0.0
    keepalive_s: float = KEEPALIVE_S
    """An idle connection (after its last answer, or since it opened) is closed after this,
    and a request head must come whole within it."""


@dataclass(frozen=True)
class Keeper:
    """Where refused events go to be taken later: `keep(app_id, payload)`, how many are
    kept (`count()`), and a step that takes them when no push comes (whether it took any)."""

    keep: Callable[[str, bytes], object] = lambda app_id, payload: None
    count: Callable[[], int] = lambda: 0
    take: Callable[[], bool] = lambda: False


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
                 apps: Sequence[str], now_s: Callable[[], float],
                 keeper: Keeper = Keeper()) -> None:
        self.keys, self.options = keys, options
        self._handler, self._now_s, self._keeper = handler, now_s, keeper
        self._primary = apps[0]
        self._statuses = {app_id: ConnectionStatus(app_id, SERVING, since=time.monotonic())
                          for app_id in apps}
        events = ThreadPoolExecutor(options.concurrency,
                                    thread_name_prefix="gateway-webhook-ingest")
        callbacks = ThreadPoolExecutor(CALLBACK_THREADS,
                                       thread_name_prefix="gateway-webhook-callback")
        wait_s = options.ingest_wait_max_s
        self._lanes = {
            False: _Lane(events, options.concurrency * (1 + QUEUE_PER_THREAD),
                         Gate(events, wait_s, "webhook events", threads=options.concurrency)),
            True: _Lane(callbacks, CALLBACK_THREADS * (1 + QUEUE_PER_THREAD),
                        Gate(callbacks, wait_s, "webhook callbacks", threads=CALLBACK_THREADS)),
        }
        self._retry: asyncio.TimerHandle | None = None
        self._order = ChatOrder()
        self._not_taken = Tally(logger)
        self._unread = Tally(logger)
        self._reading = 0
        """Bytes of the request bodies being read."""
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

    @property
    def events_in_line(self) -> int:
        """Events waiting for the push of their chat before them (order.py)."""
        return self._order.waiting

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
        # (a connection that sends no whole request head this long after it opened, or
        # after its last answer, is closed)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_S,
                                     handle_signals=False,
                                     keepalive_timeout=self.options.keepalive_s)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _push(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        cap = self.options.max_body_bytes
        size = min(request.content_length or cap, cap)
        if self._reading + size > READ_BUDGET_BYTES:
            self._unread.note("%d push(es) answered 503 unread (the latest from %s): %d bytes "
                              "of request bodies are being read", request.remote, self._reading)
            return closing({"msg": "busy"}, 503)
        self._reading += size
        try:
            if (request.content_length or 0) > self.options.max_body_bytes:
                raise web.HTTPRequestEntityTooLarge(max_size=self.options.max_body_bytes,
                                                    actual_size=request.content_length or 0)
            body = await asyncio.wait_for(request.read(), READ_TIMEOUT_S)
        except web.HTTPRequestEntityTooLarge:
            logger.warning("push from %s refused: a body over FEISHU_WEBHOOK_MAX_BODY_BYTES "
                           "(%d)", request.remote, self.options.max_body_bytes)
            return closing({"msg": "body too large"}, 413)
        except TimeoutError:
            logger.warning("push from %s refused: its body was not read within %.0fs",
                           request.remote, READ_TIMEOUT_S)
            return closing({"msg": "too slow"}, 408)
        finally:
            self._reading -= size
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
        status.last_frame_at = status.last_event_at = arrived
        callback = opened.is_callback
        lane = self._lanes[callback]
        key = None if callback else chat_key(app_id, opened.event)
        if lane.in_flight >= lane.cap:
            logger.warning("push answered 503: %d %s wait for the Redis step "
                           "(FEISHU_WEBHOOK_CONCURRENCY); %s", lane.cap,
                           "callbacks" if callback else "events",
                           "Feishu pushes it again" if callback else "it is taken later")
            lane.gate.refused("the pool's queue full")
            if not callback:  # (kept in its chat's line: once the push before it is done)
                self._order.place(key).finish(functools.partial(self._keep, app_id,
                                                                opened.payload))
            return web.json_response({"msg": "busy"}, status=503)
        return await self._take(lane, callback, app_id, opened.payload, key, arrived)

    async def _take(self, lane: _Lane, callback: bool, app_id: str, payload: bytes,
                    key: str | None, arrived: float) -> web.Response:
        """The push's turn in its chat, the intake's step off the loop, then the answer."""
        wait_s = self.options.ingest_wait_max_s
        turn = await self._order.turn(key, wait_s if wait_s > 0 else None)
        keep = None if callback else functools.partial(self._keep, app_id, payload)
        then: Callable[[], object] | None = None
        try:
            if turn.in_order:
                left_s = wait_s - (time.monotonic() - arrived) if wait_s > 0 else None
                taken = await lane.gate.step(functools.partial(
                    self._handler, app_id, "event", payload), wait_s=left_s)
            else:
                taken = lane.gate.refused("behind its chat's push before it")
            answer, code = (None, 503) if isinstance(taken, Shed) else (taken, 200)
            if isinstance(taken, Shed):
                then = keep
        except TakeLater as error:
            answer, code, then = None, 500, keep
            if callback:
                logger.error("push not taken (%s): answered 500, Feishu pushes it again",
                             error)
            else:
                self._not_taken.note("%d push(es) not taken now (the latest: %s): answered "
                                     "500, taken later", error)
        except GatewayError as error:
            logger.error("push not taken (%s): answered 500, Feishu pushes it again", error)
            answer, code = None, 500
        except Exception:  # the push handler's boundary: the server goes on
            logger.exception("push failed: answered 500, Feishu pushes it again")
            answer, code = None, 500
        finally:
            turn.finish(then)  # (a refused one is kept once the push before it is done)
        metrics.acked(time.monotonic() - arrived, code)
        return web.json_response(dict(answer or {}), status=code)

    def _keep(self, app_id: str, payload: bytes) -> None:
        """A refused event, kept to take later (on the loop)."""
        self._keeper.keep(app_id, payload)
        self._schedule_retry()

    def _schedule_retry(self, after_s: float = LATER_RETRY_S[0]) -> None:
        """With events kept to take later, take them (a step on the pool) after a while
        (on the loop)."""
        if self._retry is None and self._keeper.count():
            self._retry = self._loop.call_later(after_s, self._retried, after_s)

    def _retried(self, after_s: float) -> None:
        self._retry = None
        if not self._keeper.count():
            return
        try:
            future = self._loop.run_in_executor(self._lanes[False].executor, self._keeper.take)
        except RuntimeError:  # the pool was shut down (a stop)
            return

        def again(taken: asyncio.Future[bool]) -> None:  # (taking them: on at once)
            took = not taken.cancelled() and taken.exception() is None and taken.result()
            self._schedule_retry(0.0 if took else min(after_s * 2, LATER_RETRY_S[1]))
        future.add_done_callback(again)

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

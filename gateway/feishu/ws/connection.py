"""One app's long connection to Feishu, owned end to end on asyncio and `websockets`.

The endpoint call, the websocket, Feishu's ping frames and the websocket's own keepalive,
multi-part payloads, ACKs with `biz_rt`, reconnects with jittered backoff, and a clean
close. The handler (the events' Redis step) runs on a thread of the connection's own, in
arrival order, so pings, pongs and other frames never wait behind it; the events that
arrive while it runs are handed to it together next (group commit, with a batch handler),
and each ACK goes back as soon as its step returns. An event that cannot begin its step
within `ingest_wait_max_s` is ACKed 500 at once instead, and keeps its place in the line: a
step takes it later, in its turn (gateway/feishu/gate.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import SecretStr
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.protocol import State

from gateway.core import metrics
from gateway.core.errors import GatewayError, RetryableError, TakeLater
from gateway.core.logs import Tally
from gateway.core.presence import STOPPED
from gateway.feishu.batch_gate import BatchGate
from gateway.feishu.gate import Shed, answer_or_error
from gateway.feishu.ws import frames as f
from gateway.feishu.ws.endpoint import (
    EndpointRefused,
    ServerConfig,
    backoff_s,
    fetch_endpoint,
)
from gateway.feishu.ws.link import ConnectionDead, Link

logger = logging.getLogger(__name__)

FrameHandler = Callable[[str, bytes], Mapping[str, Any] | None]
"""(frame type "event" | "card", payload) → the callback's answer (None: a plain ACK).
Raising means ACK 500: Feishu delivers the frame again later."""
Answer = Mapping[str, Any] | None
BatchHandler = Callable[[list[tuple[str, bytes]]], Sequence[Answer | Exception]]
"""The frames taken together → each one's answer, or the error that ACKs it 500."""


def one_by_one(handler: FrameHandler) -> BatchHandler:
    """A batch handler that hands each frame to `handler` in turn."""
    def run(frames: list[tuple[str, bytes]]) -> list[Answer | Exception]:
        return [answer_or_error(functools.partial(handler, kind, payload))
                for kind, payload in frames]
    return run


T = TypeVar("T")
ENDPOINT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class _Stopped(Exception):
    """close() was called while connecting."""


@dataclass(frozen=True)
class AppCredentials:
    app_id: str
    app_secret: SecretStr


@dataclass(frozen=True)
class ConnectionOptions:
    domain: str
    ping_interval_s: float = 30.0
    ping_timeout_s: float = 10.0
    max_frame_bytes: int = 16 * 1024 * 1024
    ingest_wait_max_s: float = 0.0
    """An event not begun within this is ACKed 500 (Feishu delivers it again); 0: none."""
    max_batch: int = 64
    """The most events one step takes together (group commit)."""
    refused_cap: int = 0
    """Events refused for want of time kept in line to take later (gate.py)."""


@dataclass
class ConnectionStatus:
    """What `feishu-gateway status` shows for one app (times: `time.monotonic()` seconds,
    so a step of the host's clock moves none of them; presence.py puts them on Redis's
    clock when it publishes them)."""

    app_id: str
    state: str = "starting"
    since: float = 0.0
    last_frame_at: float = 0.0
    last_event_at: float = 0.0
    reconnects: int = 0
    detail: str = ""
    identity_known: bool = False
    """Whether the bot's own identity (open_id) is known: until it is, messages that need
    it to be judged (group @mentions, other apps' messages) are not acknowledged."""


class Connection:
    """Holds one app's long connection until `close()`: reconnects forever, except when
    Feishu refuses the very first connection for good (`fatal` then says why)."""

    def __init__(self, app: AppCredentials, options: ConnectionOptions,
                 handler: FrameHandler, *,
                 on_change: Callable[[ConnectionStatus], None] = lambda status: None,
                 rng: random.Random | None = None,
                 batch_handler: BatchHandler | None = None,
                 kept: Callable[[], int] = lambda: 0,
                 dropped: Callable[[], object] = lambda: None) -> None:
        """`handler` takes one frame; `batch_handler`, when given, the frames that arrived
        while the previous step ran, together (group commit), instead; `kept` says how many
        events the handler keeps to take first, `dropped` hears of a refused event left to
        Feishu (gate.py)."""
        self.app, self.options = app, options
        self._on_change = on_change
        self._rng = rng or random.Random()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"gateway-ingest-{app.app_id}")
        self._run = batch_handler or one_by_one(handler)
        self._gate: BatchGate[tuple[str, bytes], Answer] = BatchGate(
            self._executor, self._run, options.ingest_wait_max_s,
            f"feishu app {app.app_id}", max_batch=options.max_batch,
            refused_cap=options.refused_cap, kept=kept, dropped=dropped)
        self._stop = asyncio.Event()
        self._link: Link | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._heard_last = False
        self._ever_connected = False
        self.server = ServerConfig()
        self.status = ConnectionStatus(app.app_id, since=time.monotonic())
        self.fatal: str | None = None
        self._not_taken = Tally(logger)

    def _set(self, state: str, detail: str = "") -> None:
        """Record (and log, once per change) a state change."""
        status = self.status
        if status.state == state and status.detail == detail:
            return
        status.state, status.detail, status.since = state, detail, time.monotonic()
        level = logging.WARNING if state in ("reconnecting", "refused") else logging.INFO
        logger.log(level, "feishu app %s: %s%s", self.app.app_id, state,
                   f" ({detail})" if detail else "")
        self._on_change(status)

    async def run(self) -> None:
        """Connect, serve, reconnect with backoff; returns after close() or a fatal refusal."""
        attempt = 0
        async with httpx.AsyncClient(timeout=ENDPOINT_TIMEOUT_S, trust_env=False) as http:
            while not self._stop.is_set():
                self._set("connecting" if attempt == 0 else "reconnecting",
                          self.status.detail if attempt else "")
                try:
                    await self._session(http)
                    reason = "connection closed"
                except _Stopped:
                    break
                except EndpointRefused as error:
                    if not self._ever_connected:
                        self.fatal = str(error)
                        self._set("refused", str(error))
                        return
                    reason = str(error)
                except (RetryableError, ConnectionDead) as error:
                    reason = str(error)
                except ConnectionClosed as error:
                    reason = f"websocket closed: {error}"
                except (InvalidHandshake, OSError, TimeoutError) as error:
                    reason = f"{type(error).__name__}: {error}"
                except Exception as error:  # the connection's boundary: back off, try again
                    logger.exception("feishu app %s: connection failed", self.app.app_id)
                    reason = f"{type(error).__name__}: {error}"
                if self._stop.is_set():
                    break
                if self._heard_last:
                    attempt = 0  # it worked for a while: start the backoff over
                delay_s = backoff_s(attempt, self.server, self._rng)
                attempt += 1
                self.status.reconnects += 1
                self._set("reconnecting", f"{reason}; retry in {delay_s:.1f}s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay_s)
        self._set(STOPPED)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _session(self, http: httpx.AsyncClient) -> None:
        """One endpoint call and one websocket, until it ends (`_heard_last` then says
        whether it heard anything).
        Raises _Stopped as soon as close() is called while connecting."""
        self._heard_last = False
        endpoint = await self._unless_stopped(fetch_endpoint(
            http, self.options.domain, self.app.app_id, self.app.app_secret.get_secret_value(),
            self.server))
        self.server = endpoint.config
        o = self.options
        ws = await self._unless_stopped(connect(
            endpoint.url, ping_interval=o.ping_interval_s, ping_timeout=o.ping_timeout_s,
            close_timeout=CLOSE_TIMEOUT_S, open_timeout=ENDPOINT_TIMEOUT_S,
            max_size=o.max_frame_bytes, proxy=None, compression=None))
        link = Link(ws, endpoint.service_id, self._on_frame,
                    ping_interval_s=min(o.ping_interval_s, self.server.ping_interval_s),
                    ping_timeout_s=o.ping_timeout_s)
        self._link, self._heard_last = link, False
        self._ever_connected = True
        self._set("connected")
        try:
            await link.serve(self._stop)  # a clean stop closes it, with a close frame
        finally:
            self._link, self._heard_last = None, link.heard
            if ws.state is not State.CLOSED:
                # a dead peer never answers a close frame: close in the background, so the
                # new connection does not wait out the close timeout
                closing = asyncio.create_task(ws.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    async def _unless_stopped(self, step: Awaitable[T]) -> T:
        """`step`, cancelled the moment close() is called (then _Stopped)."""
        task = asyncio.ensure_future(step)
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                result = await task
                if isinstance(result, ClientConnection):
                    await result.close()
            raise _Stopped
        return task.result()

    async def _on_frame(self, ws: ClientConnection, frame: f.ParsedFrame) -> None:
        """One complete data frame (parts joined): the handler off the loop, then the ACK."""
        self.status.last_frame_at = time.monotonic()
        kind = frame.frame_type
        if frame.method == f.METHOD_CONTROL:
            if kind == "pong" and frame.payload:
                self.server = self.server.merged(f.parse_json(frame.payload))
            return
        if kind not in ("event", "card"):
            logger.warning("feishu app %s: data frame of type %r dropped", self.app.app_id, kind)
            return
        first, arrived = not self.status.last_event_at, time.monotonic()
        self.status.last_event_at = arrived
        if first:  # (its first event: reported now, not up to REPORT_EVERY_S later)
            self._on_change(self.status)
        try:
            taken = await self._gate.step((kind, frame.payload))
            answer, code = (None, 500) if isinstance(taken, Shed) else (taken, 200)
        except TakeLater as error:
            self._not_taken.note("%d frame(s) of app %s not taken now (the latest: %s): ACK "
                                 "500, taken later", self.app.app_id, error)
            answer, code = None, 500
        except GatewayError as error:
            logger.error("frame %s not taken (%s): ACK 500, Feishu delivers it again",
                         frame.headers.get(f.HEADER_MESSAGE_ID, "?"), error)
            answer, code = None, 500
        except Exception:  # the frame handler's boundary: the connection goes on
            logger.exception("frame %s failed: ACK 500, Feishu delivers it again",
                             frame.headers.get(f.HEADER_MESSAGE_ID, "?"))
            answer, code = None, 500
        ack = f.build_ack(frame, code=code, data=answer,
                          biz_rt_ms=int(self._gate.last_step_s * 1000))
        try:
            await ws.send(ack)
            metrics.acked(time.monotonic() - arrived, code)
        except ConnectionClosed:
            logger.info("ACK of frame %s lost with its connection (Feishu delivers it again)",
                        frame.headers.get(f.HEADER_MESSAGE_ID, "?"))

    async def close(self) -> None:
        """No reconnect; a close frame on the open connection (if any)."""
        self._stop.set()
        link = self._link
        if link is not None:
            await link.close()

    def drain(self) -> None:
        """Wait for the ingest thread's step in progress (bounded by the Redis timeout),
        then take the refused events still in the line in one last step (the handler takes
        what it kept first); frames still queued unanswered are dropped (Feishu delivers
        them again)."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        refused = self._gate.take_refused()
        if refused:
            results = answer_or_error(functools.partial(self._run, refused))
            left = len(refused) if isinstance(results, Exception) else sum(
                isinstance(result, Exception) for result in results)
            if left:
                logger.warning("feishu app %s: %d refused event(s) not taken at the stop "
                               "(Feishu delivers them again)", self.app.app_id, left)

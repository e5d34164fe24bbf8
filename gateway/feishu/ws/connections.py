"""The listener's long connections: one `Connection` per app, all on one asyncio loop on a
thread of their own, and their states in Redis for `feishu-gateway status`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import redis

from gateway.core.presence import CONNECTION_TIMES, CONNECTIONS_KEY, publish
from gateway.core.settings import Settings
from gateway.feishu.ws.connection import (
    Answer,
    AppCredentials,
    Connection,
    ConnectionOptions,
    ConnectionStatus,
)

logger = logging.getLogger(__name__)

AppHandler = Callable[[str, str, bytes], Mapping[str, Any] | None]
"""(app_id, frame type, payload) → the callback's answer; see connection.FrameHandler."""
AppBatchHandler = Callable[[str, list[tuple[str, bytes]]], Sequence[Answer | Exception]]
"""(app_id, frames) → each one's answer or error; see connection.BatchHandler."""
REPORT_EVERY_S = 5.0
RESTART_AFTER_S = 1.0


def options_for(settings: Settings) -> ConnectionOptions:
    return ConnectionOptions(domain=settings.feishu_domain,
                             ping_interval_s=settings.ws_ping_interval_s,
                             ping_timeout_s=settings.ws_ping_timeout_s,
                             ingest_wait_max_s=settings.ingest_wait_max_ms / 1000,
                             max_batch=settings.ingest_group_max,
                             refused_cap=settings.ingest_later_cap)


class Connections:
    """Starts a connection per app; `fatal` says why the listener gave up (only when Feishu
    refused an app's very first connection for good)."""

    def __init__(self, settings: Settings, handler: AppHandler, *,
                 on_change: Callable[[ConnectionStatus], None] = lambda status: None,
                 batch_handler: AppBatchHandler | None = None,
                 kept: Callable[[str], int] = lambda app_id: 0,
                 dropped: Callable[[str], object] = lambda app_id: None) -> None:
        """`kept(app_id)` says how many of the app's events the handler keeps to take first,
        `dropped(app_id)` hears of one of its refused events left to Feishu (connection.py)."""
        options = options_for(settings)
        self.connections = [
            Connection(AppCredentials(app_id, secret), options,
                       functools.partial(handler, app_id), on_change=on_change,
                       batch_handler=None if batch_handler is None
                       else functools.partial(batch_handler, app_id),
                       kept=functools.partial(kept, app_id),
                       dropped=functools.partial(dropped, app_id))
            for app_id, secret in settings.apps]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-ws", daemon=True)
        self.fatal: str | None = None

    def start(self) -> Connections:
        self._thread.start()
        self._started.wait(5.0)
        return self

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the listener stopped (by stop() or a fatal refusal)."""
        return self._done.wait(timeout_s)

    def statuses(self) -> list[ConnectionStatus]:
        return [connection.status for connection in self.connections]

    def stop(self, timeout_s: float = 6.0) -> None:
        """A close frame on every connection, no reconnect; then the ingest steps in
        progress finish (so what they admitted is published). Within about `timeout_s`
        plus one Redis timeout."""
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        loop = self._loop
        if loop is not None and not self._done.is_set():
            future = asyncio.run_coroutine_threadsafe(self._close_all(), loop)
            try:
                future.result(timeout_s)
            except (TimeoutError, RuntimeError) as error:
                logger.warning("long connections did not close in %.0fs (%r)", timeout_s,
                               error)
        self._thread.join(max(deadline - time.monotonic(), 0.1))
        for connection in self.connections:
            connection.drain()

    async def _close_all(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections), return_exceptions=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._done.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._started.set()
        if self._stopping.is_set():
            return
        await asyncio.gather(*(self._keep(c) for c in self.connections))

    async def _keep(self, connection: Connection) -> None:
        """Run one connection; a bug that escapes it restarts it, a fatal refusal ends
        the listener."""
        while not self._stopping.is_set():
            try:
                await connection.run()
            except Exception:  # the connection's boundary: it is started again
                logger.exception("long connection of app %s failed; starting it again",
                                 connection.app.app_id)
                await asyncio.sleep(RESTART_AFTER_S)
                continue
            if connection.fatal is not None:
                self.fatal = connection.fatal
                self._stopping.set()
                await self._close_all()
            return


class StatusBoard:
    """Publishes a listener's connection states to `gw:connections` every few seconds and
    at once when one changes (from a thread of its own: never a Redis call on the loop)."""

    def __init__(self, client: redis.Redis, owner: str,
                 statuses: Callable[[], list[ConnectionStatus]]) -> None:
        self._redis, self.owner, self._statuses = client, owner, statuses
        self._poke = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-ws-status", daemon=True)

    def start(self) -> StatusBoard:
        self._thread.start()
        return self

    def changed(self, status: ConnectionStatus) -> None:
        self._poke.set()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        self._thread.join(5.0)
        try:
            self._publish()
        except redis.RedisError as error:
            logger.info("connection states not published at stop: %s", error)

    def _publish(self) -> None:
        for status in self._statuses():
            publish(self._redis, CONNECTIONS_KEY, f"{self.owner}|{status.app_id}",
                    asdict(status), times=CONNECTION_TIMES)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poke.wait(REPORT_EVERY_S)
            self._poke.clear()
            try:
                self._publish()
            except redis.RedisError as error:
                logger.debug("connection states not published: %s", error)


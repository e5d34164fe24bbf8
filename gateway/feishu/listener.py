"""The Feishu long connection: the real `lark.ws.Client` on its own thread and loop.

The SDK captures a module-level event loop at import and runs handlers on it, so
each client thread installs a fresh loop into the SDK module before it builds the
client. The handler is one call (`on_event`). A supervisor watches the client: when
its thread dies, or the connection stays down longer than the reconnect deadline (the
SDK's receive task can die during a reconnect while `start()` blocks on: a deaf
client), it stops the client and builds a new one. `stop()` closes the websocket with
a close frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import lark_oapi as lark
import lark_oapi.ws.client as lark_ws_client
from lark_oapi.ws.exception import ClientException

from gateway.settings import Settings

logger = logging.getLogger(__name__)

EventSink = Callable[[Mapping[str, Any]], object]
MAX_BACKOFF_S = 60.0
MESSAGE_EVENT = "im.message.receive_v1"


class RawEvents(lark.EventDispatcherHandler):  # type: ignore[misc]
    """The SDK's event handler, minus its object model: each event frame's payload reaches
    `sink` as parsed JSON (about 27 µs instead of 330 µs for the SDK's unmarshal and our
    marshal back). `_do_without_validation` is the one method lark-oapi 1.7's ws client
    calls per event frame (its deprecation note for the public name points there).
    Anything but a message event, or a frame that is not JSON, is ACKed and dropped with
    one line; a sink error still means ACK 500 (Feishu redelivers)."""

    def __init__(self, sink: EventSink) -> None:
        super().__init__()
        self._sink = sink

    def _do_without_validation(self, payload: bytes) -> None:
        event = decode_event(payload)
        if event is not None:
            self._sink(event)


def decode_event(payload: bytes) -> Mapping[str, Any] | None:
    """The payload of a message event, or None (logged) for anything else."""
    try:
        event = json.loads(payload)
    except ValueError as error:
        logger.warning("event frame dropped: not JSON (%s)", error)
        return None
    if not isinstance(event, dict):
        logger.warning("event frame dropped: not a JSON object")
        return None
    header = event.get("header")
    kind = header.get("event_type") if isinstance(header, dict) else None
    if kind != MESSAGE_EVENT:
        logger.info("event of type %r ignored (only %s is handled)", kind, MESSAGE_EVENT)
        return None
    return event


class Listener:
    def __init__(self, settings: Settings, on_event: EventSink, *,
                 check_interval_s: float = 1.0, restart_backoff_s: float = 1.0) -> None:
        self._settings = settings
        self._on_event = on_event
        self.deadline_s = settings.reconnect_deadline_s
        self.check_interval_s = check_interval_s
        self.restart_backoff_s = restart_backoff_s
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: lark.ws.Client | None = None
        self._ever_connected = False
        self.restarts = 0
        self.fatal: str | None = None
        self._supervisor = threading.Thread(target=self._supervise, name="gateway-listener",
                                            daemon=True)

    @property
    def connected(self) -> bool:
        client = self._client
        return client is not None and client._conn is not None

    def start(self) -> Listener:
        self._supervisor.start()
        return self

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the listener stopped (by stop() or a fatal error)."""
        return self._stopping.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close the websocket (with a close frame) and end the client thread."""
        self._stopping.set()
        self._close_client(timeout_s)
        self._supervisor.join(timeout_s)

    def _run_client(self) -> None:
        """Build a client on a fresh loop and run it until it stops or fails."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        lark_ws_client.loop = loop  # the SDK reads this module global everywhere
        handler = RawEvents(self._on_event)
        client = lark.ws.Client(
            self._settings.feishu_app_id, self._settings.feishu_app_secret.get_secret_value(),
            event_handler=handler, domain=self._settings.feishu_domain,
            log_level=lark.LogLevel.INFO)
        self._loop, self._client = loop, client
        try:
            client.start()
        except asyncio.CancelledError:
            pass  # our own _close_client() ended start()'s wait
        except ClientException as error:  # refused for good (credentials, limits)
            if not self._ever_connected:
                self.fatal = f"feishu refused the long connection: {error}"
            logger.error("feishu refused the long connection: %s", error)
        except Exception:  # the client thread's boundary: the supervisor builds a new one
            logger.exception("feishu long connection failed")
        finally:
            self._client = None
            with contextlib.suppress(RuntimeError):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _supervise(self) -> None:
        backoff_s = self.restart_backoff_s
        while not self._stopping.is_set():
            thread = threading.Thread(target=self._run_client, name="gateway-ws", daemon=True)
            thread.start()
            if self._watch(thread):
                backoff_s = self.restart_backoff_s
            thread.join()
            if self.fatal is not None:
                self._stopping.set()
                return
            if self._stopping.wait(backoff_s):
                return
            backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
            self.restarts += 1
            logger.warning("rebuilding the feishu long connection (restart %d)", self.restarts)

    def _watch(self, thread: threading.Thread) -> bool:
        """Wait while the client lives; end it once it was down past the deadline.
        Returns True when the client had connected at some point."""
        down_since = time.monotonic()
        had_connection = False
        while thread.is_alive() and not self._stopping.wait(self.check_interval_s):
            if self.connected:
                down_since, had_connection = time.monotonic(), True
                self._ever_connected = True
            elif time.monotonic() - down_since > self.deadline_s:
                logger.warning("long connection down for over %.0fs; the client is deaf",
                               self.deadline_s)
                self._close_client(5.0)
                break
        return had_connection

    def _close_client(self, timeout_s: float) -> None:
        loop, client = self._loop, self._client
        if loop is None or client is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            future = asyncio.run_coroutine_threadsafe(_shutdown(client), loop)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                future.result(timeout_s)


async def _shutdown(client: lark.ws.Client) -> None:
    """The clean stop lark-oapi 1.7.5 lacks: no reconnect, close frame, end start()."""
    client._auto_reconnect = False
    current = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not current]
    waiter = [t for t in others if getattr(t.get_coro(), "__name__", "") == "_select"]
    workers = [t for t in others if t not in waiter]
    for task in workers:
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    await client._disconnect()
    for task in waiter:
        task.cancel()

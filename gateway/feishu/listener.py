"""The Feishu long connection: the real `lark.ws.Client` on its own thread and loop.

The SDK captures a module-level event loop at import and runs handlers on it, so
each connection thread installs a fresh loop into the SDK module before it builds
the client. The handler is one call (`on_event`). A supervisor restarts the
client thread if it dies; `stop()` closes the websocket with a close frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import lark_oapi as lark
import lark_oapi.ws.client as lark_ws_client
from lark_oapi.ws.exception import ClientException

from gateway.settings import Settings

logger = logging.getLogger(__name__)

EventSink = Callable[[Mapping[str, Any]], object]


class Listener:
    def __init__(self, settings: Settings, on_event: EventSink,
                 restart_backoff_s: float = 1.0) -> None:
        self._settings = settings
        self._on_event = on_event
        self._restart_backoff_s = restart_backoff_s
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: lark.ws.Client | None = None
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

    def _handle(self, data: lark.im.v1.P2ImMessageReceiveV1) -> None:
        self._on_event(json.loads(lark.JSON.marshal(data) or "{}"))

    def _run_client(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        lark_ws_client.loop = loop  # the SDK reads this module global everywhere
        handler = (lark.EventDispatcherHandler.builder("", "")
                   .register_p2_im_message_receive_v1(self._handle).build())
        client = lark.ws.Client(
            self._settings.feishu_app_id, self._settings.feishu_app_secret.get_secret_value(),
            event_handler=handler, domain=self._settings.feishu_domain,
            log_level=lark.LogLevel.INFO)
        self._loop, self._client = loop, client
        try:
            client.start()
        except asyncio.CancelledError:
            pass  # our own stop() cancelled start()'s wait
        finally:
            with contextlib.suppress(RuntimeError):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _supervise(self) -> None:
        while not self._stopping.is_set():
            try:
                self._run_client()
            except ClientException as error:  # bad credentials and the like: final
                self.fatal = f"feishu refused the long connection: {error}"
                logger.error("%s", self.fatal)
                self._stopping.set()
                return
            except Exception:  # a dead client thread is restarted, never left deaf
                logger.exception("feishu long connection failed")
            if self._stopping.wait(self._restart_backoff_s):
                return
            logger.warning("restarting the feishu long connection")

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the listener stopped (by stop() or a fatal error)."""
        return self._stopping.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close the websocket (with a close frame) and end the client thread."""
        self._stopping.set()
        loop, client = self._loop, self._client
        if loop is not None and client is not None and not loop.is_closed():
            future = asyncio.run_coroutine_threadsafe(_shutdown(client), loop)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                future.result(timeout_s)
        self._supervisor.join(timeout_s)


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

"""Fixtures for tests against the Feishu simulator, and a runner for the real lark.ws.Client.

A test module imports the fixtures under other names to avoid shadowing its parameters:
`from tests.support.simulator_fixtures import simulator as simulator_fixture  # noqa: F401`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import lark_oapi as lark
import lark_oapi.ws.client as lark_ws_client
import pytest

from gateway.simulator import Simulator
from tests.support.rig import TEST_REDELIVERY_S

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Coroutines of the SDK client that must be cancelled before it disconnects, so the
# receive loop does not see the close as an error and try to reconnect.
_SDK_LOOPS = {lark_ws_client.Client._receive_message_loop.__code__,
              lark_ws_client.Client._ping_loop.__code__}


class Inbox(Generic[T]):
    """A thread-safe list that handlers append to and tests wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: list[T] = []

    def add(self, item: T) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout_s: float = 10) -> list[T]:
        """Wait until at least `count` items arrived; returns all of them."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._items) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"inbox: wanted {count} item(s), got {len(self._items)}")
                self._cond.wait(remaining)
            return list(self._items)


class SdkWsClient:
    """Runs lark.ws.Client the way the product will: own thread, own fresh event loop.

    The SDK keeps its loop in a module global (`lark_oapi.ws.client.loop`), so only one
    client can run per process; starting a second one while one runs raises RuntimeError.
    """

    _active_lock = threading.Lock()
    _active: SdkWsClient | None = None

    def __init__(self, domain: str, app_id: str, app_secret: str,
                 handler: lark.EventDispatcherHandler) -> None:
        self._args = (domain, app_id, app_secret, handler)
        self._thread = threading.Thread(target=self._run, daemon=True, name="lark-ws-client")
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: lark.ws.Client | None = None
        self.error: BaseException | None = None

    def start(self) -> SdkWsClient:
        with SdkWsClient._active_lock:
            if SdkWsClient._active is not None and SdkWsClient._active._thread.is_alive():
                raise RuntimeError("only one lark.ws.Client can run per process")
            SdkWsClient._active = self
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("lark.ws.Client thread did not start")
        return self

    def _run(self) -> None:
        domain, app_id, app_secret, handler = self._args
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        # the SDK made a module-level loop at import, which nothing runs or closes: it is
        # closed here, not left to the garbage collector (an unclosed loop warns)
        previous = lark_ws_client.loop
        if previous is not loop and not previous.is_running() and not previous.is_closed():
            previous.close()
        lark_ws_client.loop = loop
        self._loop = loop
        try:
            self._client = lark.ws.Client(app_id, app_secret, event_handler=handler,
                                          domain=domain, log_level=lark.LogLevel.WARNING)
            self._ready.set()
            self._client.start()
        except asyncio.CancelledError:
            logger.debug("lark.ws.Client stopped")
        except Exception as exc:
            logger.info("lark.ws.Client ended with an error", exc_info=True)
            self.error = exc
        finally:
            self._ready.set()
            self._drain(loop)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._client is not None:
            self._client._auto_reconnect = False
        while pending := [t for t in asyncio.all_tasks(loop) if not t.done()]:
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()

    async def _shutdown(self) -> None:
        client = self._client
        assert client is not None
        me = asyncio.current_task()
        sdk_loops = [t for t in asyncio.all_tasks()
                     if getattr(t.get_coro(), "cr_code", None) in _SDK_LOOPS]
        for task in sdk_loops:
            task.cancel()
        await asyncio.gather(*sdk_loops, return_exceptions=True)
        try:
            await asyncio.wait_for(client._disconnect(), 5)  # sends a close frame
        finally:
            for task in asyncio.all_tasks():
                if task is not me:
                    task.cancel()  # includes the task start() blocks on

    def _request_stop(self) -> None:
        if self._client is not None:
            self._client._auto_reconnect = False
            asyncio.get_running_loop().create_task(self._shutdown())

    def stop(self, timeout_s: float = 10) -> None:
        """Disconnect cleanly, stop the SDK loop and join the thread."""
        loop = self._loop
        if self._thread.is_alive() and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._request_stop)
            except RuntimeError:
                logger.debug("SDK loop closed while stopping")
        self.wait_finished(timeout_s)

    def wait_finished(self, timeout_s: float = 10) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError("lark.ws.Client thread did not stop")


def message_handler(on_message: Callable[[Any], None]) -> lark.EventDispatcherHandler:
    """An event dispatcher for im.message.receive_v1 only."""
    return (lark.EventDispatcherHandler.builder("", "")
            .register_p2_im_message_receive_v1(on_message).build())


@pytest.fixture(name="simulator")
def simulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulator]:
    """A started simulator on a free loopback port, stopped after the test."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    sim = Simulator(redelivery_s=TEST_REDELIVERY_S).start()
    try:
        yield sim
    finally:
        sim.stop()


SdkClientFactory = Callable[..., SdkWsClient]


@pytest.fixture(name="sdk_ws_client")
def sdk_ws_client(simulator: Simulator) -> Iterator[SdkClientFactory]:
    """Factory `(handler, app_secret=None) -> started SdkWsClient`; all stopped at teardown."""
    started: list[SdkWsClient] = []

    def factory(handler: lark.EventDispatcherHandler,
                app_secret: str | None = None) -> SdkWsClient:
        client = SdkWsClient(simulator.url, simulator.app_id,
                             app_secret or simulator.app_secret, handler)
        started.append(client.start())
        return client

    yield factory
    for client in started:
        client.stop()

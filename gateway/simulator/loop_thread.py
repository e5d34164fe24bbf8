"""An asyncio event loop running forever on a daemon thread, driven from other threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_CALL_MARGIN_S = 5.0


class LoopThread:
    """Owns one loop and its thread; `call` runs coroutines on it synchronously."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._loop.is_closed()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run `coro` on the loop and wait for its result (timeout_s plus a margin)."""
        if not self.running:
            coro.close()
            raise RuntimeError("simulator is not running; call start() first")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the synchronous simulator API cannot be called from its loop")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout_s + _CALL_MARGIN_S)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop; the thread cancels leftover tasks and closes it before exiting."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)
        elif not self._thread.ident and not self._loop.is_closed():
            self._loop.close()  # never started

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            asyncio.set_event_loop(None)
            loop.close()

"""One open websocket to Feishu: receive frames, join multi-part payloads, ping, watch for
silence, close with a close frame.

A connection is dead when neither a pong nor any other frame arrived within the ping
timeout after a ping (`ConnectionDead`); the websocket's own keepalive checks the same at
its level. Each complete frame goes to `on_frame` in a task of its own, so the receive loop
never waits behind it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from gateway.feishu.ws import frames as f

logger = logging.getLogger(__name__)

OnFrame = Callable[[ClientConnection, f.ParsedFrame], Coroutine[Any, Any, None]]
PARTS_KEPT_S = 5.0
CLOSE_WAIT_S = 3.0


class ConnectionDead(Exception):
    """No pong or data within the ping timeout: the socket is a zombie."""


class Parts:
    """Multi-part payloads by frame message_id, joined when the last part is in; parts
    older than PARTS_KEPT_S are dropped (Feishu sends the event again). A payload of more
    than frames.PARTS_MAX parts, or a part numbered past its payload's, is refused."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._open: dict[str, tuple[float, list[bytes | None]]] = {}

    def add(self, frame_id: str, total: int, index: int, chunk: bytes) -> bytes | None:
        """The joined payload once all `total` parts arrived, else None."""
        now = self._clock()
        for key in [k for k, (at, _) in self._open.items() if now - at > PARTS_KEPT_S]:
            del self._open[key]
        if total <= 1:
            return chunk
        if total > f.PARTS_MAX:
            raise ValueError(f"{total} parts, more than {f.PARTS_MAX}")
        if not 0 <= index < total:
            raise ValueError(f"part {index} of {total}")
        at, parts = self._open.setdefault(frame_id, (now, [None] * total))
        if len(parts) != total:
            raise ValueError(f"frame {frame_id}: {total} parts, earlier {len(parts)}")
        parts[index] = chunk
        if any(part is None for part in parts):
            return None
        del self._open[frame_id]
        return b"".join(part for part in parts if part is not None)

    def __len__(self) -> int:
        return len(self._open)


class Link:
    def __init__(self, ws: ClientConnection, service_id: int, on_frame: OnFrame, *,
                 ping_interval_s: float, ping_timeout_s: float) -> None:
        self._ws = ws
        self._service_id = service_id
        self._on_frame = on_frame
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self._heard = asyncio.Event()
        self._parts = Parts()
        self._tasks: set[asyncio.Task[None]] = set()
        self.heard = False
        """Whether any frame came: a connection that worked (the backoff starts over)."""

    async def serve(self, stop: asyncio.Event) -> None:
        """Until the connection ends (ConnectionClosed / ConnectionDead raised) or `stop`
        is set (then it returns after a close frame)."""
        pieces = [asyncio.create_task(self._receive()), asyncio.create_task(self._ping()),
                  asyncio.create_task(stop.wait())]
        try:
            done, _ = await asyncio.wait(pieces, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pieces:
                task.cancel()
            await asyncio.gather(*pieces, return_exceptions=True)
        if stop.is_set():
            await self.close()
            return
        for task in done:
            task.result()  # raises what ended the connection
        raise ConnectionClosed(None, None)

    async def close(self) -> None:
        """A close frame (going away), waiting briefly for Feishu's; then the handlers'
        last ACKs are moot (Feishu delivers unacknowledged frames again)."""
        try:
            await asyncio.wait_for(self._ws.close(1000, "client stopping"), CLOSE_WAIT_S)
        except TimeoutError:
            logger.warning("the close frame could not be sent in %.0fs", CLOSE_WAIT_S)
        for task in list(self._tasks):
            task.cancel()

    async def _receive(self) -> None:
        async for message in self._ws:
            self._heard.set()
            self.heard = True
            if not isinstance(message, bytes):
                logger.warning("feishu sent a text websocket message; ignored")
                continue
            try:
                frame = f.parse_frame(message)
            except ValueError as error:
                logger.warning("undecodable frame dropped: %s", error)
                continue
            if frame.method == f.METHOD_DATA:
                frame = self._joined(frame)  # type: ignore[assignment]
                if frame is None:
                    continue
            task = asyncio.create_task(self._on_frame(self._ws, frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _joined(self, frame: f.ParsedFrame) -> f.ParsedFrame | None:
        """The frame with its whole payload, None while parts are missing or it is bad."""
        h = frame.headers
        missing = [k for k in (f.HEADER_TYPE, f.HEADER_MESSAGE_ID, f.HEADER_SUM, f.HEADER_SEQ)
                   if k not in h]
        if missing:
            logger.warning("data frame without %s dropped", ", ".join(missing))
            return None
        try:
            payload = self._parts.add(h[f.HEADER_MESSAGE_ID], int(h[f.HEADER_SUM]),
                                      int(h[f.HEADER_SEQ]), frame.payload)
        except ValueError as error:
            logger.warning("data frame %s dropped: %s", h[f.HEADER_MESSAGE_ID], error)
            return None
        if payload is None:
            return None
        return dataclasses.replace(frame, headers=dict(h), payload=payload)

    async def _ping(self) -> None:
        ping = f.build_ping(self._service_id)
        while True:
            self._heard.clear()
            try:  # a write that cannot go out (a full buffer to a dead peer) is death too
                await asyncio.wait_for(self._ws.send(ping), self.ping_timeout_s)
                await asyncio.wait_for(self._heard.wait(), self.ping_timeout_s)
            except TimeoutError:
                raise ConnectionDead(
                    f"no pong or data within {self.ping_timeout_s:g}s of a ping") from None
            await asyncio.sleep(self.ping_interval_s)

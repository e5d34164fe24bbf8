"""A small OpenAI-compatible chat-completions server for the tests: the real wire protocol
(JSON body, Bearer key, `stream: true` answered as server-sent events up to `data: [DONE]`),
no model behind it. What it answers is written in the last user message:

- `fail ...`   HTTP 500 with OpenAI's error shape
- `slow ...`   streams a piece every 0.1 s for 30 s (long enough to be stopped)
- `count N`    streams `n0 n1 ... n<N-1> `, a piece every 0.05 s
- anything else  `heard <n>: <the user messages so far, joined by ' / '>`, in 3 pieces
It records every request's messages and whether a stream was closed by the client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.simulator.loop_thread import LoopThread
from tests.support.agents import TINY_PNG

API_KEY = "sk-test-not-a-real-key"


@dataclass
class Seen:
    requests: list[list[dict[str, str]]] = field(default_factory=list)
    closed_early: int = 0
    streams_done: int = 0


class FakeLlm:
    def __init__(self) -> None:
        self.seen = Seen()
        self._guard = threading.Lock()
        self._loop = LoopThread("fake-llm")
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> list[list[dict[str, str]]]:
        with self._guard:
            return list(self.seen.requests)

    def start(self) -> FakeLlm:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        self._loop.start()
        self._loop.call(self._startup(sock), 10.0)
        return self

    async def _startup(self, sock: socket.socket) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    def stop(self) -> None:
        if self._runner is not None:
            self._loop.call(self._runner.cleanup(), 10.0)
        self._loop.stop()

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return error(401, "invalid api key", "invalid_request_error")
        body: dict[str, Any] = await request.json()
        messages = list(body.get("messages") or [])
        with self._guard:
            self.seen.requests.append(messages)
        said = [m["content"] for m in messages if m.get("role") == "user"]
        last = said[-1] if said else ""
        if last.startswith("fail"):
            return error(500, "the model is overloaded", "server_error")
        pieces: list[Any]
        if last.startswith("slow"):
            pieces, pause_s = ["piece "] * 300, 0.1
        elif last.startswith("draw"):  # a model that draws: its picture as a data URL
            url = "data:image/png;base64," + base64.b64encode(TINY_PNG).decode()
            pieces, pause_s = ["Drawn: ", {"images": [
                {"type": "image_url", "image_url": {"url": url}}]}, "a dot."], 0.0
        elif last.startswith("count ") and last[6:].isdigit():
            pieces, pause_s = [f"n{n} " for n in range(int(last[6:]))], 0.05
        else:
            text = f"heard {len(said)}: {' / '.join(said)}"
            third = max(1, len(text) // 3)
            pieces, pause_s = [text[:third], text[third:2 * third], text[2 * third:]], 0.0
        if not body.get("stream"):
            return web.json_response({"object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "".join(
                    p for p in pieces if isinstance(p, str))},
                 "finish_reason": "stop"}]})
        return await self._stream(request, pieces, pause_s)

    def _closed_early(self) -> None:
        with self._guard:
            self.seen.closed_early += 1

    async def _stream(self, request: web.Request, pieces: list[Any],
                      pause_s: float) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for piece in pieces:
                chunk = {"object": "chat.completion.chunk", "choices": [
                    {"index": 0, "delta": piece if isinstance(piece, dict) else {
                        "content": piece}, "finish_reason": None}]}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
                if pause_s:
                    await asyncio.sleep(pause_s)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:  # the client went away: nothing more to write
            self._closed_early()
            return response
        except asyncio.CancelledError:
            self._closed_early()
            raise
        with self._guard:
            self.seen.streams_done += 1
        return response


def error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)

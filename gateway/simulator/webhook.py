"""Feishu's HTTP event subscription, on the simulator's side: each event (a message, a card
callback) is POSTed to the gateway's request URL, encrypted and signed when the app has an
Encrypt Key, and counts as answered only on HTTP 200 (its JSON body is the callback's
answer); the redeliverer then pushes it again on Feishu's schedule (15 s, 5 min, 1 h, 6 h:
the simulator's redelivery schedule).

With several request URLs (replicas behind a load balancer) pushes go round-robin, and a
replica that refuses the connection is skipped, as a load balancer skips a dead backend.

The simulator pushes over a pool of connections (aiohttp's, 100 at once); a push waiting
for one of them has not been sent yet: its 3 s, and its ACK latency, count from when its
request went out (Feishu's senders are many and do not queue behind one another)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from Crypto.Cipher import AES

from gateway.simulator.state import SimState

logger = logging.getLogger(__name__)

UNANSWERED = "push-unanswered:"
"""The counters of pushes that got no answer, by why: `timeout`, `disconnected`
(`Simulator.unanswered_pushes`)."""
Answered = Callable[[str, int, "dict[str, Any] | None", "int | None"], None]
"""(frame id, HTTP status, the answer's JSON object, None) → recorded as an ACK."""


@dataclass(frozen=True)
class WebhookConfig:
    """The app's subscription: its Verification Token, its Encrypt Key ('' : plain pushes),
    and how long a push waits for its answer (Feishu: 3 s)."""

    verification_token: str = "sim-verification-token"
    encrypt_key: str = ""
    timeout_s: float = 3.0


def encrypt(plain: bytes, key: str) -> str:
    """As Feishu encrypts a push body: AES-256-CBC with SHA-256(key), a random IV first,
    PKCS7 padding, base64."""
    iv = os.urandom(16)
    pad = 16 - len(plain) % 16
    cipher = AES.new(hashlib.sha256(key.encode()).digest(), AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(plain + bytes([pad]) * pad)).decode()


def signed_request(payload: bytes, config: WebhookConfig, *,
                   at_s: float | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers Feishu sends for one push of `payload` (stamped now)."""
    body = payload
    headers = {"Content-Type": "application/json; charset=utf-8"}
    if config.encrypt_key:
        body = json.dumps({"encrypt": encrypt(payload, config.encrypt_key)}).encode()
        ts, nonce = str(int(time.time() if at_s is None else at_s)), secrets.token_hex(8)
        sign = hashlib.sha256((ts + nonce + config.encrypt_key).encode() + body).hexdigest()
        headers.update({"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce,
                        "X-Lark-Signature": sign})
    return body, headers


def with_token(payload: bytes, token: str) -> bytes:
    """The event with the app's verification token in `header.token` (schema 2.0)."""
    event = json.loads(payload)
    if isinstance(event, dict) and isinstance(event.get("header"), dict):
        event["header"]["token"] = token
        return json.dumps(event, ensure_ascii=False).encode()
    return payload


class WebhookPusher:
    """Delivers events by POST (the hub's `deliver`, for the redeliverer)."""

    def __init__(self, state: SimState, config: WebhookConfig, answered: Answered) -> None:
        self.state, self.config, self._answered = state, config, answered
        self.urls: list[str] = []
        self._next = 0
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(self._headers_sent)
            self._session = aiohttp.ClientSession(trust_env=False, trace_configs=[trace])
        return self._session

    async def _headers_sent(self, _session: aiohttp.ClientSession, context: Any,
                            _params: object) -> None:
        """A push's request went out: its ACK latency counts from here."""
        frame_id = context.trace_request_ctx
        if isinstance(frame_id, str):
            self.state.mark_sent(frame_id)

    async def deliver(self, payload: bytes, *, frame_id: str, frame_type: str, parts: int,
                      timeout_s: float | None, app_id: str | None = None) -> None:
        """One push of the event; its answer, if any, is recorded at once."""
        body, headers = signed_request(with_token(payload, self.config.verification_token),
                                       self.config)
        status, answer = 0, None
        for _ in range(max(len(self.urls), 1)):
            url = self._pick()
            if url is None:
                break
            try:
                status, answer = await self._post(url, body, headers, frame_id)
                break
            except TimeoutError:  # (before ClientConnectionError: aiohttp's read timeout is
                logger.info("push %s to %s: no answer in %.1fs", frame_id, url,  # both)
                            self.config.timeout_s)
                self.state.bump(f"{UNANSWERED}timeout")
                break
            except aiohttp.ClientConnectionError as error:
                if isinstance(error, aiohttp.ServerDisconnectedError):
                    logger.info("push %s to %s: no answer (%s)", frame_id, url, error)
                    self.state.bump(f"{UNANSWERED}disconnected")
                    break  # it may have been taken: Feishu retries later, never at once
                logger.info("push %s: %s refused the connection; the next one", frame_id, url)
        if status:  # (no answer is no ACK: the redeliverer pushes it again)
            self._answered(frame_id, status, answer, None)

    def _pick(self) -> str | None:
        if not self.urls:
            return None
        url = self.urls[self._next % len(self.urls)]
        self._next += 1
        return url

    async def _post(self, url: str, body: bytes, headers: dict[str, str],
                    frame_id: str | None = None) -> tuple[int, dict[str, Any] | None]:
        """POST one push; TimeoutError when it could not connect, or was not answered,
        within the timeout of its own (a wait for a free connection is not counted)."""
        limit_s = self.config.timeout_s
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=limit_s, sock_read=limit_s)
        async with self._open().post(url, data=body, headers=headers, timeout=timeout,
                                     trace_request_ctx=frame_id) as response:
            async with asyncio.timeout(limit_s):  # (the whole answer within it too)
                raw = await response.read()
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = None
        return response.status, answer if isinstance(answer, dict) and answer else None

    async def verify_url(self, url: str) -> bool:
        """Feishu's URL verification of a request URL: whether it answered the challenge."""
        challenge = secrets.token_hex(8)
        payload = json.dumps({"type": "url_verification", "challenge": challenge,
                              "token": self.config.verification_token}).encode()
        body, headers = signed_request(payload, self.config)
        status, answer = await self._post(url, body, headers)
        return status == 200 and answer is not None and answer.get("challenge") == challenge

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

"""Fault injection for the open APIs: what can go wrong on a send or a token request."""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, fields

from aiohttp import web

from gateway.simulator import config as c

# Fault kinds; a scripted kind may pin the HTTP status, e.g. "5xx-json:503".
HTTP_5XX_JSON = "5xx-json"
HTTP_5XX_HTML = "5xx-html"
RATE_LIMIT_429 = "429"
RATE_LIMIT_400 = "400-ratelimit"
RESET = "reset"
REFUSE = "refuse"

SEND_KINDS = frozenset({HTTP_5XX_JSON, HTTP_5XX_HTML, RATE_LIMIT_429, RATE_LIMIT_400, RESET})
TOKEN_KINDS = frozenset({HTTP_5XX_JSON, HTTP_5XX_HTML, RATE_LIMIT_429, REFUSE})

CODE_RATE_LIMIT = 99991400
RATE_LIMIT_MSG = "request trigger frequency limit"
RATE_LIMIT_PER_S = 50
_JSON_5XX = (500, 502, 503)
_HTML_5XX = (502, 504)
_HTML_TITLES = {502: "502 Bad Gateway", 504: "504 Gateway Time-out"}


@dataclass(frozen=True)
class SendFaults:
    """Per-request probabilities (0..1, summing to at most 1) of each send fault."""

    http_5xx_json: float = 0.0
    http_5xx_html: float = 0.0
    rate_limit_429: float = 0.0
    rate_limit_400: float = 0.0
    reset_after_create: float = 0.0
    seed: int | None = None
    rate_limit_reset_s: int = 1

    def __post_init__(self) -> None:
        probs = self.weighted()
        if any(not 0.0 <= p <= 1.0 for _, p in probs):
            raise ValueError(f"fault probabilities must be within 0..1: {self}")
        if sum(p for _, p in probs) > 1.0 + 1e-9:
            raise ValueError(f"fault probabilities must sum to at most 1: {self}")

    def weighted(self) -> list[tuple[str, float]]:
        """(kind, probability) for every fault kind."""
        kinds = {"http_5xx_json": HTTP_5XX_JSON, "http_5xx_html": HTTP_5XX_HTML,
                 "rate_limit_429": RATE_LIMIT_429, "rate_limit_400": RATE_LIMIT_400,
                 "reset_after_create": RESET}
        return [(kinds[f.name], float(getattr(self, f.name))) for f in fields(self)
                if f.name in kinds]


@dataclass(frozen=True)
class Fault:
    """One fault to apply: its kind and, for HTTP errors, the status to answer with."""

    kind: str
    status: int
    reset_s: int = 1


def parse_kind(spec: str, allowed: frozenset[str]) -> tuple[str, int | None]:
    """"429" -> ("429", None); "5xx-json:503" -> ("5xx-json", 503); ValueError if unknown."""
    kind, _, status = spec.partition(":")
    if kind not in allowed:
        raise ValueError(f"unknown fault kind {spec!r}; expected one of {sorted(allowed)}")
    if status and not (status.isdigit() and 100 <= int(status) <= 599):
        raise ValueError(f"bad HTTP status in fault {spec!r}")
    return kind, int(status) if status else None


class FaultPlan:
    """Scripted faults (consumed first, in order) then the random plan; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random()
        self._send: SendFaults | None = None
        self._send_script: deque[tuple[str, int | None]] = deque()
        self._token_script: deque[tuple[str, int | None]] = deque()
        self._by_uuid: dict[str, tuple[str, int | None]] = {}
        self._bot_info: tuple[str, int | None] | None = None
        self._reads: dict[str, tuple[str, int | None]] = {}
        self._rejected: frozenset[str] = frozenset()
        self._reject_code = c.CODE_INVALID_MESSAGE

    def reject_types(self, msg_types: Iterable[str] | None, code: int) -> None:
        """Refuse sends of these msg_types with `code`; None or empty: refuse none."""
        with self._lock:
            self._rejected = frozenset(msg_types or ())
            self._reject_code = code

    def rejection(self, msg_type: str) -> int | None:
        """The code a send of `msg_type` is refused with, or None."""
        with self._lock:
            return self._reject_code if msg_type in self._rejected else None

    def set_send_faults(self, faults: SendFaults | None) -> None:
        with self._lock:
            self._send = faults
            if faults is not None:
                self._rng = random.Random(faults.seed)

    def script_send(self, kinds: Iterable[str]) -> None:
        parsed = [parse_kind(k, SEND_KINDS) for k in kinds]
        with self._lock:
            self._send_script.extend(parsed)

    def script_token(self, kinds: Iterable[str]) -> None:
        parsed = [parse_kind(k, TOKEN_KINDS) for k in kinds]
        with self._lock:
            self._token_script.extend(parsed)

    def fail_uuid(self, uuid: str, kind: str | None) -> None:
        """Fail every send carrying `uuid` with `kind` until called again with None."""
        with self._lock:
            if kind is None:
                self._by_uuid.pop(uuid, None)
            else:
                self._by_uuid[uuid] = parse_kind(kind, SEND_KINDS)

    def fail_read(self, message_id: str, kind: str | None) -> None:
        """Fail every read of message `message_id` (im/v1/messages/:id) with `kind` until
        called again with None."""
        with self._lock:
            if kind is None:
                self._reads.pop(message_id, None)
            else:
                self._reads[message_id] = parse_kind(kind, SEND_KINDS)

    def next_read(self, message_id: str) -> Fault | None:
        with self._lock:
            spec = self._reads.get(message_id)
            return None if spec is None else self._fault(*spec, 1)

    def fail_bot_info(self, kind: str | None) -> None:
        """Fail every bot info request with `kind` until called again with None."""
        with self._lock:
            self._bot_info = None if kind is None else parse_kind(kind, TOKEN_KINDS)

    def next_bot_info(self) -> Fault | None:
        with self._lock:
            return None if self._bot_info is None else self._fault(*self._bot_info, 1)

    def fault_of(self, kind: str, status: int | None) -> Fault:
        """The fault of `kind` (a status drawn when not pinned) for any API."""
        with self._lock:
            return self._fault(kind, status, 1)

    def _fault(self, kind: str, status: int | None, reset_s: int) -> Fault:
        if status is None:
            if kind == HTTP_5XX_JSON:
                status = self._rng.choice(_JSON_5XX)
            elif kind == HTTP_5XX_HTML:
                status = self._rng.choice(_HTML_5XX)
            else:
                status = {RATE_LIMIT_429: 429, RATE_LIMIT_400: 400}.get(kind, 200)
        return Fault(kind, status, reset_s)

    def next_send(self, uuid: str | None = None) -> Fault | None:
        """The fault for the next send request, or None to serve it normally."""
        with self._lock:
            reset_s = 1 if self._send is None else self._send.rate_limit_reset_s
            if uuid is not None and uuid in self._by_uuid:
                return self._fault(*self._by_uuid[uuid], reset_s)
            if self._send_script:
                return self._fault(*self._send_script.popleft(), reset_s)
            if self._send is None:
                return None
            draw = self._rng.random()
            for kind, prob in self._send.weighted():
                if draw < prob:
                    return self._fault(kind, None, reset_s)
                draw -= prob
            return None

    def next_token(self) -> Fault | None:
        with self._lock:
            if not self._token_script:
                return None
            return self._fault(*self._token_script.popleft(), 1)


def rate_limit_response(status: int, *, limit: int, reset_s: int) -> web.Response:
    """Feishu's frequency-control answer (api-call-guide/frequency-control): 429 (400 on
    some older APIs), code 99991400, the window's limit and the seconds until it resets."""
    headers = {"x-ogw-ratelimit-limit": str(limit), "x-ogw-ratelimit-reset": str(reset_s)}
    return web.json_response({"code": CODE_RATE_LIMIT, "msg": RATE_LIMIT_MSG},
                             status=status, headers=headers)


def fault_response(fault: Fault) -> web.Response:
    """The HTTP answer for an HTTP-level fault (not for RESET)."""
    if fault.kind == HTTP_5XX_JSON:
        return web.json_response({"code": 1, "msg": "internal error"}, status=fault.status)
    if fault.kind == HTTP_5XX_HTML:
        title = _HTML_TITLES.get(fault.status, f"{fault.status} Bad Gateway")
        return web.Response(status=fault.status, content_type="text/html",
                            text=f"<html><body><h1>{title}</h1></body></html>")
    if fault.kind in (RATE_LIMIT_429, RATE_LIMIT_400):
        return rate_limit_response(fault.status, limit=RATE_LIMIT_PER_S, reset_s=fault.reset_s)
    if fault.kind == REFUSE:
        return web.json_response({"code": c.CODE_BAD_SECRET, "msg": "app secret invalid"},
                                 status=fault.status)
    raise ValueError(f"fault {fault.kind!r} has no HTTP response")


def abort_connection(request: web.Request) -> None:
    """Drop the client's TCP connection with a reset (RST) and without any response bytes."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # linger 0: close() sends RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()

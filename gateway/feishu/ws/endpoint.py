"""The long connection's first step: ask Feishu where to connect, and how often to retry.

`POST {domain}/callback/ws/endpoint` with the app's credentials answers the websocket URL
and a ClientConfig. Parsing the answer and the reconnect delays are pure functions.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from gateway.core.errors import GatewayError, RetryableError

ENDPOINT_PATH = "/callback/ws/endpoint"
RETRY_CODES = frozenset({1, 1000040343})
"""Feishu is busy or failed internally: ask again later. Any other non-zero code is final."""
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0


class EndpointRefused(GatewayError):
    """Feishu refused the long connection with a final code (bad credentials, limits)."""

    def __init__(self, code: int, msg: str) -> None:
        super().__init__(f"feishu refused the long connection: code {code}: {msg}")
        self.code = code


@dataclass(frozen=True)
class ServerConfig:
    """Feishu's ClientConfig: its ping interval and reconnect settings (seconds)."""

    ping_interval_s: float = 120.0
    reconnect_count: int = -1
    reconnect_interval_s: float = 120.0
    reconnect_nonce_s: float = 30.0

    def merged(self, raw: Any) -> ServerConfig:
        """This config with the fields `raw` (a ClientConfig object) carries; bad ones are
        ignored (pure)."""
        if not isinstance(raw, dict):
            return self
        names = {"PingInterval": "ping_interval_s", "ReconnectCount": "reconnect_count",
                 "ReconnectInterval": "reconnect_interval_s",
                 "ReconnectNonce": "reconnect_nonce_s"}
        values = dict(self.__dict__)
        for key, name in names.items():
            value = raw.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[name] = int(value) if name == "reconnect_count" else float(value)
        return ServerConfig(**values)


@dataclass(frozen=True)
class Endpoint:
    url: str
    service_id: int
    config: ServerConfig


def parse_endpoint(status: int, text: str, base: ServerConfig) -> Endpoint:
    """The endpoint answer as a value; RetryableError or EndpointRefused otherwise (pure)."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise RetryableError(f"ws endpoint: HTTP {status}, not JSON")
    code, msg = body.get("code"), str(body.get("msg", ""))
    if status != 200 or code in RETRY_CODES:
        raise RetryableError(f"ws endpoint: HTTP {status}, code {code}: {msg}")
    if code != 0:
        raise EndpointRefused(int(code) if isinstance(code, int) else -1, msg)
    data = body.get("data")
    url = data.get("URL") if isinstance(data, dict) else None
    if not isinstance(url, str) or not url:
        raise RetryableError("ws endpoint: answer without a URL")
    try:
        service_id = int(parse_qs(urlsplit(url).query)["service_id"][0])
    except (KeyError, IndexError, ValueError):
        raise RetryableError("ws endpoint: URL without a service_id") from None
    config = base.merged(data.get("ClientConfig") if isinstance(data, dict) else None)
    return Endpoint(url, service_id, config)


async def fetch_endpoint(http: httpx.AsyncClient, domain: str, app_id: str, secret: str,
                         base: ServerConfig) -> Endpoint:
    """One endpoint call; network failures are RetryableError."""
    try:
        response = await http.post(domain + ENDPOINT_PATH, json={
            "AppID": app_id, "AppSecret": secret}, headers={"locale": "zh"})
    except httpx.HTTPError as error:
        raise RetryableError(f"ws endpoint: {type(error).__name__}: {error}") from None
    return parse_endpoint(response.status_code, response.text, base)


def backoff_s(attempt: int, config: ServerConfig, rng: random.Random) -> float:
    """The wait before reconnect attempt `attempt` (0 first): exponential from 1 s, capped
    at 60 s or the server's ReconnectInterval if smaller, with jitter; the first attempt
    also waits up to the server's ReconnectNonce, as Feishu asks, so a fleet restarted at
    once does not reconnect at once (pure given `rng`)."""
    cap_s = BACKOFF_CAP_S
    if config.reconnect_interval_s > 0:
        cap_s = min(cap_s, config.reconnect_interval_s)
    delay_s = min(cap_s, BACKOFF_BASE_S * 2 ** min(attempt, 16)) * rng.uniform(0.5, 1.0)
    if attempt == 0 and config.reconnect_nonce_s > 0:
        delay_s += rng.uniform(0, min(config.reconnect_nonce_s, BACKOFF_CAP_S))
    return float(delay_s)

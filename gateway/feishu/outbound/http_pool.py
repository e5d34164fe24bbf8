"""Kept-alive HTTP/1.1 connections to one origin, on the standard library's `http.client`.

The open API's calls are small JSON requests and answers, one after another on a few
connections: the request is built as bytes and the answer read whole, with nothing between.
A general client (URL and header models, event hooks, an h11 state machine) spent over twice
the CPU a call here (docs/performance.md).

A connection is reused while it is open: one the server closed while it was idle (its
socket reads as ready, at end of file) or idle past `idle_s` is closed and replaced before a
request is written to it, never after. Anything that goes wrong on the wire (connect, reset,
timeout, a malformed answer) is one `TransportError`, and that connection is closed.

`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` are honoured as curl reads them, for
an http:// proxy (an HTTPS origin through it is tunnelled with CONNECT; another kind of
proxy is a SettingsError); TLS verifies against `SSL_CERT_FILE`
/ `SSL_CERT_DIR` when set, else certifi's bundle, as httpx does.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import select
import ssl
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit
from urllib.request import getproxies_environment

from gateway.core.errors import SettingsError

USER_AGENT = "feishu-gateway"


class TransportError(Exception):
    """The request got no answer: connecting, writing or reading failed, or timed out."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    """Looked up without regard to case."""
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def json_body(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def multipart(form: Mapping[str, str], files: Mapping[str, tuple[str, bytes]]) -> tuple[
        bytes, str]:
    """multipart/form-data of `form`'s fields and `files` (field → name, bytes): the body and
    its content type (pure; a name's quotes and line breaks are percent-encoded, as browsers
    do)."""
    boundary = uuid.uuid4().hex
    parts: list[bytes] = []
    for name, value in form.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}"'
                     f"\r\n\r\n".encode() + value.encode() + b"\r\n")
    for name, (filename, data) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}";'
                     f' filename="{_quoted(filename)}"\r\nContent-Type: application/octet-stream'
                     f"\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _quoted(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace(
        "\n", "%0A")


def bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether NO_PROXY (`*`, or names and suffixes, each with or without a port) lets `host`
    past the proxy (pure)."""
    host = host.lower()
    for entry in (part.strip().lower() for part in no_proxy.split(",")):
        name, _, entry_port = entry.partition(":")
        name = name.lstrip(".")
        if entry == "*" or (name and (host == name or host.endswith(f".{name}")) and
                            entry_port in ("", str(port))):
            return True
    return False


def _tls_context() -> ssl.SSLContext:
    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context()
    import certifi  # httpx's own bundle, installed with it
    return ssl.create_default_context(cafile=certifi.where())


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection's socket is closed or has unasked-for bytes."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        poller = select.poll()  # (select.select fails on a descriptor past 1,024)
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class HttpPool:
    """Thread-safe: each request takes a connection of its own, and gives it back when its
    answer was read whole and the server keeps it open."""

    def __init__(self, base_url: str, *, timeout_s: float, connect_timeout_s: float,
                 size: int = 8, idle_s: float = 60.0) -> None:
        origin = urlsplit(base_url)
        if origin.scheme not in ("http", "https") or not origin.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._https = origin.scheme == "https"
        self._host = origin.hostname
        self._port = origin.port or (443 if self._https else 80)
        self._prefix = origin.path.rstrip("/")
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._size = size
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._context = _tls_context() if self._https else None
        self._proxy = self._proxy_for(origin.scheme)
        self._absolute = f"{origin.scheme}://{origin.netloc}" \
            if self._proxy is not None and not self._https else ""
        """An http origin through a proxy is asked for by its absolute URL."""

    def _proxy_for(self, scheme: str) -> tuple[str, int, dict[str, str]] | None:
        proxies = getproxies_environment()
        url = proxies.get(scheme) or proxies.get("all")
        if not url or bypassed(self._host, self._port, proxies.get("no", "")):
            return None
        proxy = urlsplit(url if "://" in url else f"http://{url}")
        if proxy.scheme != "http" or not proxy.hostname:
            raise SettingsError(f"proxy {proxy.scheme}://{proxy.hostname or ''} (from the "
                                "environment): only an http:// proxy is supported (HTTPS "
                                "goes through it with CONNECT)")
        headers = {}
        if proxy.username is not None:
            login = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(
                login.encode()).decode()
        return proxy.hostname, proxy.port or 80, headers

    def _connect(self) -> http.client.HTTPConnection:
        host, port = (self._proxy[0], self._proxy[1]) if self._proxy else (self._host, self._port)
        connection: http.client.HTTPConnection
        if self._https:
            connection = http.client.HTTPSConnection(host, port, context=self._context,
                                                     timeout=self._connect_timeout_s)
            if self._proxy is not None:
                connection.set_tunnel(self._host, self._port, headers=self._proxy[2])
        else:
            connection = http.client.HTTPConnection(host, port, timeout=self._connect_timeout_s)
        connection.connect()
        if connection.sock is not None:
            connection.sock.settimeout(self._timeout_s)
        return connection

    def _take(self) -> http.client.HTTPConnection:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                connection, since = self._idle.pop()
                if now - since <= self._idle_s and not _dropped(connection):
                    return connection
                connection.close()
        return self._connect()

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._size:
                self._idle.append((connection, time.monotonic()))
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()

    def _target(self, path: str, params: Mapping[str, str] | None) -> str:
        query = f"?{urlencode(params)}" if params else ""
        return f"{self._absolute}{self._prefix}{path}{query}"

    def _headers(self, headers: Mapping[str, str], content_type: str) -> dict[str, str]:
        sent = {"User-Agent": USER_AGENT, "Accept": "*/*"}
        if content_type:
            sent["Content-Type"] = content_type
        if self._absolute and self._proxy is not None:
            sent.update(self._proxy[2])
        sent.update(headers)
        return sent

    @contextmanager
    def stream(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
               headers: Mapping[str, str] | None = None, body: bytes | None = None,
               content_type: str = "") -> Iterator[http.client.HTTPResponse]:
        """The answer with its body unread: read it in blocks (`read(n)`). The connection is
        kept only when the body was read to its end."""
        try:
            connection = self._take()
        except (OSError, http.client.HTTPException) as error:
            raise TransportError(f"{type(error).__name__}: {error}") from None
        keep = False
        try:
            try:
                connection.request(method, self._target(path, params), body=body,
                                   headers=self._headers(headers or {}, content_type))
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as error:
                raise TransportError(f"{type(error).__name__}: {error}") from None
            yield response
            keep = response.isclosed() and not response.will_close
        finally:
            if keep:
                self._give_back(connection)
            else:
                connection.close()

    def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None, body: bytes | None = None,
                content_type: str = "") -> Answer:
        """One request and its whole answer (one attempt)."""
        with self.stream(method, path, params=params, headers=headers, body=body,
                         content_type=content_type) as response:
            try:
                data = response.read()
            except (OSError, http.client.HTTPException) as error:
                raise TransportError(f"{type(error).__name__}: {error}") from None
            return Answer(response.status, response.headers, data)

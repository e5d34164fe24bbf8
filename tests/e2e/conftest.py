"""The gateway the multi-process suites share: listener and Celery workers as subprocesses
on the session's Redis and simulator. The pipeline tests run once per supported Celery
pool (prefork, threads)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import GatewayProcess
from gateway.simulator import Simulator
from tests.support.rig import (
    EDGE_PING_S,
    EDGE_SECOND_APP,
    MODES,
    POOLS,
    Fleet,
    Front,
    Rig,
    Spawn,
    env_for,
    rig_up,
)


@pytest.fixture(scope="session")
def gateway_env(redis_server: EmbeddedRedis, feishu: Simulator) -> dict[str, str]:
    return env_for(redis_server.url, feishu)


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


@pytest.fixture(scope="session")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A gateway for the Feishu side (test_connection.py, test_admission.py): fast pings, a
    second app, default mention gating, a DM allowlist, one group rule and sessions per
    user in groups."""
    app_id, secret, bot = EDGE_SECOND_APP
    with rig_up(tmp_path_factory, start="nothing", FEISHU_WS_PING_INTERVAL=str(EDGE_PING_S),
                FEISHU_WS_PING_TIMEOUT=str(EDGE_PING_S), FEISHU_APPS=f"{app_id}:{secret}",
                GATEWAY_LOG_LEVEL="DEBUG", FEISHU_REQUIRE_MENTION="true",
                FEISHU_SESSION_SCOPE="user",
                FEISHU_DM_POLICY="allowlist", FEISHU_ALLOWED_USERS="ou_user_1,ou_friend",
                FEISHU_GROUP_RULES=json.dumps({"oc_quiet_team": {"require_mention": False}})
                ) as rig:
        rig.sim.add_app(app_id, secret, bot_open_id=bot)
        rig.up()
        rig.sim.wait_connected(2, timeout_s=30)
        yield rig


@pytest.fixture(scope="session")
def webhook_gateway(tmp_path_factory: pytest.TempPathFactory, pool: str) -> Iterator[Rig]:
    """The session's gateway in webhook mode (`serve`; the simulator POSTs encrypted,
    signed pushes), on the same pool, for the few tests that run in both modes."""
    with rig_up(tmp_path_factory, mode="webhook", pool=pool) as rig:
        yield rig


@pytest.fixture(params=MODES)
def front(request: pytest.FixtureRequest, feishu: Simulator, spawn: Spawn,
          redis_client: redis.Redis) -> Front:
    """The session's gateway by long connection, then by webhook (a test taking it runs in
    both modes; keep them few: each mode costs the test's time again)."""
    if request.param == "ws":
        request.getfixturevalue("listener")
        return Front("ws", feishu, redis_client, lambda: spawn.logs("listener"))
    rig: Rig = request.getfixturevalue("webhook_gateway")
    return Front("webhook", rig.sim, rig.client(), lambda: rig.fleet.logs("listener"))

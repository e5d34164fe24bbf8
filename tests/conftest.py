"""Real parts only: a redis-server we start, the Feishu simulator, Celery workers and
listeners as subprocesses running the product's own commands (tests/support/rig.py; the
fixtures of the multi-process suites: tests/e2e/conftest.py).

When a test fails, the report carries the last lines of every gateway process's log and of
Redis's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.simulator import Simulator
from tests.chaos.monkey import FIGURES
from tests.support.rig import (
    FLEETS,
    SERVERS,
    TEST_REDELIVERY_S,
    client_of,
    start_redis,
    stop_redis,
)
from tests.support.simulator_fixtures import simulator  # noqa: F401  (re-exported fixture)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing multi-process test says why: every process's last log lines."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    for fleet in FLEETS:
        for proc in fleet.started:
            state = "running" if proc.alive else f"exited {proc.process.returncode}"
            report.sections.append((f"{proc.name} log, last 40 lines ({state})", proc.tail()))
    for server in SERVERS:
        report.sections.append((f"redis {server.port} log, last 20 lines", server.tail()))


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


@pytest.fixture
def redis_client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(redis_server)


@pytest.fixture(scope="session")
def feishu() -> Iterator[Simulator]:
    """One simulator for the session's gateway processes; tests use their own chat ids."""
    sim = Simulator(redelivery_s=TEST_REDELIVERY_S).start()
    yield sim
    sim.stop()


@pytest.fixture
def chat_id() -> str:
    return f"oc_{uuid.uuid4().hex[:16]}"


CHAOS_LINES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collects the chaos runs' figures, in the process that prints the summary."""
    if report.when == "call":
        CHAOS_LINES.extend(str(line) for name, line in report.user_properties
                           if name == FIGURES)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The chaos suite's figures, one line per run, whatever the outcome."""
    for line in CHAOS_LINES:
        terminalreporter.write_line(line)

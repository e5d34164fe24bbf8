"""A failing multi-process test says why: its report carries the last lines of
every gateway process's log and of Redis's."""

from __future__ import annotations

import pytest

from gateway.ops.processes import REPO

pytest_plugins = ["pytester"]

INNER = '''
import pytest
from tests.support.rig import Fleet, start_redis, stop_redis
from gateway.ops.processes import GatewayProcess


@pytest.fixture
def fleet(tmp_path_factory):
    server = start_redis()
    fleet = Fleet({}, tmp_path_factory)
    yield fleet
    fleet.stop_all()
    stop_redis(server)


def test_fails(fleet, tmp_path_factory):
    proc = GatewayProcess("listener-0", ["-c", "print('the cause is here'); import time; "
                                         "time.sleep(60)"], {}, tmp_path_factory.mktemp("p"))
    fleet.started.append(proc)
    proc.wait_for_log("the cause is here", 10)
    assert False, "something went wrong"
'''


def test_a_failing_test_reports_every_process_log_tail(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport  # noqa\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "listener-0 log, last 40 lines (running)" in text
    assert "the cause is here" in text
    assert "log, last 20 lines" in text and "Ready to accept connections" in text

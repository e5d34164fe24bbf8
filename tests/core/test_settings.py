"""Settings are read once, typed, frozen, and a bad value is one clear line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.core.errors import SettingsError
from gateway.core.settings import load_settings
from gateway.ops.processes import REPO


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    for name in ("FEISHU_DOMAIN", "REDIS_URL", "GATEWAY_AGENT", "GATEWAY_CANCEL_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(_env_file=None)
    assert settings.feishu_domain == "https://open.feishu.cn"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.agent == "echo" and settings.cancel_timeout_s == 5.0
    with pytest.raises(ValueError):
        settings.agent = "other"


def test_secret_never_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", "s3cret-value")
    settings = load_settings(_env_file=None)
    assert "s3cret-value" not in repr(settings) and "s3cret-value" not in str(settings)
    assert settings.feishu_app_secret.get_secret_value() == "s3cret-value"


@pytest.mark.parametrize("name, value, expected", [
    ("GATEWAY_CANCEL_TIMEOUT", "soon", "GATEWAY_CANCEL_TIMEOUT"),
    ("GATEWAY_CANCEL_TIMEOUT", "0", "greater than 0"),
    ("FEISHU_DOMAIN", "ftp://x", "http(s) URL"),
    ("REDIS_URL", "localhost:6379", "redis:// URL"),
    ("GATEWAY_DEDUPE_TTL_S", "60", "GATEWAY_DEDUPE_TTL_S"),
    ("GATEWAY_DURABLE_ACK", "always", "GATEWAY_DURABLE_ACK: Input should be 'none', 'aof' or"),
    ("GATEWAY_REPLY_RETRY_BUDGET_S", "-1", "GATEWAY_REPLY_RETRY_BUDGET_S"),
    ("FEISHU_WEBHOOK_KEEPALIVE_S", "1", "FEISHU_WEBHOOK_KEEPALIVE_S"),
    ("GATEWAY_REDIS_TIMEOUT_S", "0", "GATEWAY_REDIS_TIMEOUT_S"),
    ("GATEWAY_STOP_DEBOUNCE_S", "x", "GATEWAY_STOP_DEBOUNCE_S"),
])
def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                      expected: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        load_settings(_env_file=None)


@pytest.mark.parametrize("env, expected", [
    ({"GATEWAY_REDIS_CLUSTER": "true"}, "GATEWAY_REDIS_CLUSTER: Value error, a Redis Cluster "
     "keeps the chat state only: set CELERY_BROKER_URL"),
    ({"GATEWAY_REDIS_CLUSTER": "true", "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",
      "GATEWAY_DURABLE_ACK": "aof"}, "GATEWAY_DURABLE_ACK is not supported on a Redis Cluster"),
])
def test_a_cluster_needs_its_own_broker_and_no_durable_ack(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=expected):
        load_settings(_env_file=None)
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("GATEWAY_DURABLE_ACK", "none")
    assert load_settings(_env_file=None).redis_cluster


@pytest.mark.parametrize("argv", [
    ["-m", "gateway.ops.cli", "listen"],
    ["-m", "celery", "-A", "tasks", "worker"],
])
def test_bad_setting_stops_start_up_with_one_line(argv: list[str], tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, *argv], cwd=str(tmp_path), capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "GATEWAY_CANCEL_TIMEOUT": "soon", "PYTHONPATH": str(REPO)},
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "GATEWAY_CANCEL_TIMEOUT" in lines[0] and "Traceback" not in result.stderr



def test_bad_agent_stops_the_worker_at_start(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tasks", "worker"], cwd=str(tmp_path),
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "GATEWAY_AGENT": "no.such.module:factory",
             "PYTHONPATH": str(REPO)})
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("feishu-gateway: bad setting GATEWAY_AGENT: cannot import")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("value", "expected"), [(None, "False False"), ("true", "True True")])
def test_task_events_are_opt_in(value: str | None, expected: str) -> None:
    """Celery task events cost worker CPU; they are off unless asked for."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_TASK_EVENTS"}
    if value is not None:
        env["GATEWAY_TASK_EVENTS"] = value
    out = subprocess.run(
        [sys.executable, "-c", "import celeryconfig as c; "
         "print(c.worker_send_task_events, c.task_send_sent_event)"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected


def test_several_apps_first_app_first_and_secrets_never_shown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_APP_ID", "cli_one")
    monkeypatch.setenv("FEISHU_APP_SECRET", "secret-one")
    monkeypatch.setenv("FEISHU_APPS", " cli_two:secret-two , cli_one:other ,cli_three:s3")
    settings = load_settings(_env_file=None)
    assert [app_id for app_id, _ in settings.apps] == ["cli_one", "cli_two", "cli_three"]
    assert settings.apps[0][1].get_secret_value() == "secret-one", "FEISHU_APP_ID's own secret"
    assert settings.primary_app_id == "cli_one" and settings.has_credentials
    assert "secret-two" not in repr(settings)
    monkeypatch.setenv("FEISHU_APPS", "cli_two:secret-two,cli_bad-no-secret")
    with pytest.raises(SettingsError) as refused:
        load_settings(_env_file=None)
    assert str(refused.value).startswith("bad setting FEISHU_APPS:")
    assert "entry 2 is not app_id:app_secret" in str(refused.value)
    assert "secret-two" not in str(refused.value)


def test_admin_and_allowed_lists_and_ping_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_ADMINS", "ou_a, ou_b;ou_c")
    monkeypatch.setenv("FEISHU_WS_PING_INTERVAL", "15")
    settings = load_settings(_env_file=None)
    assert settings.admin_ids == frozenset({"ou_a", "ou_b", "ou_c"})
    assert settings.allowed_user_ids == frozenset()
    assert (settings.ws_ping_interval_s, settings.ws_ping_timeout_s) == (15.0, 10.0)
    monkeypatch.setenv("FEISHU_WS_PING_TIMEOUT", "0")
    with pytest.raises(SettingsError, match="FEISHU_WS_PING_TIMEOUT"):
        load_settings(_env_file=None)
    monkeypatch.setenv("FEISHU_WS_PING_TIMEOUT", "5")
    monkeypatch.setenv("FEISHU_LATE_EVENTS", "replay")
    with pytest.raises(SettingsError, match="FEISHU_LATE_EVENTS"):
        load_settings(_env_file=None)


def test_a_bad_url_setting_never_shows_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "http://:s3cretpw@127.0.0.1:6379/0")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "REDIS_URL" in str(caught.value) and "s3cretpw" not in str(caught.value)

"""The Celery app: `celery -A tasks worker` consumes every queue the gateway uses, and logs
at GATEWAY_LOG_LEVEL unless given -l/--loglevel. A worker imports the tasks (tasks/turns.py)
at start; a process that only sends them (the listener, the CLI) never does."""

from celery import Celery

from gateway.core.errors import SettingsError
from gateway.core.logs import default_worker_log_level
from gateway.core.settings import load_settings

app = Celery("gateway", include=["tasks.turns"])
app.config_from_object("celeryconfig")


def _log_level() -> str:
    try:
        return load_settings().log_level
    except SettingsError as error:  # as celeryconfig says it: one line, no traceback
        raise SystemExit(f"feishu-gateway: {error}") from None


default_worker_log_level(_log_level)

__all__ = ["app"]

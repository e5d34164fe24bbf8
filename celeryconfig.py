"""Every Celery setting of the gateway, taken from the one settings object (computed in
gateway/broker/celery_config.py)."""

from gateway.broker.celery_config import celery_config
from gateway.core.errors import SettingsError
from gateway.core.settings import load_settings

try:
    _settings = load_settings()
except SettingsError as _error:
    raise SystemExit(f"feishu-gateway: {_error}") from None

globals().update(celery_config(_settings))

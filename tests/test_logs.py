"""No secrets in logs: connection URLs and Redis passwords are masked."""

from __future__ import annotations

import logging

from gateway.logs import RedactSecrets, masked_url


def test_long_connection_url_secrets_are_masked() -> None:
    record = logging.LogRecord("Lark", logging.INFO, __file__, 1, "connected to %s", (
        "wss://msg-frontier.feishu.cn/ws/v2?device_id=1&access_key=abc123&service_id=2"
        "&ticket=t-xyz",), None)
    assert RedactSecrets().filter(record)
    line = record.getMessage()
    assert "abc123" not in line and "t-xyz" not in line
    assert "access_key=***" in line and "ticket=***" in line and "device_id=1" in line


def test_redis_password_is_masked() -> None:
    assert masked_url("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_a_password_in_a_urls_query_is_masked_too() -> None:
    assert masked_url("redis://host:6379/0?password=s3cret&db=1") == \
        "redis://host:6379/0?password=***&db=1"
    assert masked_url("unix:///run/redis.sock?password=s3cret") == \
        "unix:///run/redis.sock?password=***"

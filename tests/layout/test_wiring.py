"""Each process builds only its own wiring: the listener never imports the worker's agents,
runner, tasks or Celery's worker command; a worker (its logs dressed, its agent checked) never
imports the listener's desk, the long connection or the Feishu SDK. Built in a fresh
interpreter each, with settings that reach nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "REDIS_URL": "redis://127.0.0.1:1/0",
       "FEISHU_APP_ID": "cli_wiring", "FEISHU_APP_SECRET": "secret",
       "FEISHU_DOMAIN": "http://127.0.0.1:1"}
REPORT = "import sys; print('\\n'.join(sorted(sys.modules)))"
LISTENER = ("from tasks import app\n"
            "from gateway.core.settings import load_settings\n"
            "from gateway.listener.service import ListenerService\n"
            "ListenerService(load_settings(), app)\n" + REPORT)
WORKER = ("import logging, tasks.turns\n"
          "process = tasks.turns.process\n"
          "hooks = process.hooks()\n"
          "hooks[0].logs_set_up(logging.getLogger())\n"
          "from gateway.agents import load_factory\n"
          "load_factory(process.settings().agent)\n"
          "process.runtime().runner\n" + REPORT)


def modules_after(script: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", script], cwd=str(REPO), env=ENV,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(f"{p}.") for p in packages))


@pytest.mark.parametrize(("script", "wired", "foreign"), [
    (LISTENER, "gateway.listener.service",
     ("gateway.agents", "gateway.worker", "tasks.turns", "celery.apps.worker")),
    (WORKER, "gateway.worker.turn_runner",
     ("gateway.listener", "gateway.feishu.ws", "lark_oapi")),
], ids=["listener", "worker"])
def test_a_process_imports_only_its_own_wiring(script: str, wired: str,
                                               foreign: tuple[str, ...]) -> None:
    modules = modules_after(script)
    assert wired in modules
    assert loaded(modules, foreign) == []

"""docker/compose.yaml against the Compose Specification's schema (no Docker engine here),
and the promises it makes: every service checked for health, Flower behind auth, ports on
loopback only, no credentials in the file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker" / "compose.yaml"


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    schema = json.loads((Path(__file__).parent / "data" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator(schema).validate(compose())  # the schema says draft-07


def test_every_service_has_a_healthcheck_and_workers_split_the_queues() -> None:
    services = compose()["services"]
    assert {"redis", "listener", "worker", "worker-low", "flower"} <= set(services)
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert "gateway.turns" in services["worker"]["command"]
    assert "gateway.release" in services["worker-low"]["command"]
    assert "--appendonly" in services["redis"]["command"]


def test_flower_needs_auth_and_nothing_listens_beyond_loopback() -> None:
    services = compose()["services"]
    assert "FLOWER_BASIC_AUTH" in " ".join(services["flower"]["command"])
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} to all"
    text = COMPOSE.read_text(encoding="utf-8")
    assert not re.search(r"(SECRET|PASSWORD|TOKEN)\s*[:=]\s*\S", text), "a credential"

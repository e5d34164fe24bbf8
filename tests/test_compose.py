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
    text = COMPOSE.read_text(encoding="utf-8").replace("FEISHU_APP_SECRET: sim-secret", "")
    assert not re.search(r"(SECRET|PASSWORD|TOKEN)\s*[:=]\s*\S", text), "a credential"
    assert services["demo-listener"]["environment"]["FEISHU_DOMAIN"] == "http://simulator:9900"
    assert services["simulator"]["profiles"] == services["demo-listener"]["profiles"] == ["demo"]


def test_metrics_are_served_inside_and_the_dashboard_reads_only_series_we_export() -> None:
    services = compose()["services"]
    assert services["listener"]["environment"]["GATEWAY_METRICS_PORT"]
    for name in ("worker", "worker-low"):
        env = services[name]["environment"]
        assert env["GATEWAY_WORKER_METRICS_PORT"] and env["PROMETHEUS_MULTIPROC_DIR"]
    assert "PROMETHEUS_MULTIPROC_DIR" not in services["listener"]["environment"]
    dashboard = json.loads((ROOT / "docker" / "grafana-dashboard.json").read_text())
    exported = set(re.findall(r'"(gateway_[a-z_]+)"',
                              (ROOT / "gateway" / "metrics.py").read_text()))
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"gateway_[a-z_]+", target["expr"])}
    suffixes = ("_bucket", "_count", "_sum", "_total")

    def known(series: str) -> bool:
        return series in exported or any(
            series.endswith(s) and series.removesuffix(s) in exported for s in suffixes)

    assert used and {u for u in used if not known(u)} == set()

"""docker/compose.yaml against the Compose Specification's schema (no Docker engine here),
and what each service needs to work: every service of every profile is checked against a
table of what its kind needs, the demo's credentials against a real simulator started with
the simulator service's own command."""

from __future__ import annotations

import json
import re
import shlex
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from gateway.agents import load_factory
from gateway.core.errors import SettingsError
from gateway.ops.processes import GatewayProcess, wait_until

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
Service = dict[str, Any]
Accepts = Callable[[str, str], bool]


class Kind(NamedTuple):
    found_by: str  # in "image command"
    health: str  # what its healthcheck runs
    needs: tuple[str, ...]  # what it needs to work


KINDS = {
    "redis": Kind(r"^redis:", "redis-cli ping", ()),
    "simulator": Kind(r"\bfeishu-gateway simulator\b", "http://127.0.0.1:{port}/", ()),
    "listener": Kind(r"\bfeishu-gateway listen\b", "feishu-gateway health listener",
                     ("redis", "open-api", "settings")),
    "webhook": Kind(r"\bfeishu-gateway serve\b", "feishu-gateway health listener",
                    ("redis", "open-api", "settings")),
    "worker": Kind(r"\bcelery -A tasks worker\b", "feishu-gateway health worker",
                   ("redis", "open-api", "agent", "settings")),
    "flower": Kind(r"\bcelery -A tasks flower\b", "http://127.0.0.1:{port}/healthcheck",
                   ("broker", "settings")),
}
"""Every kind of service and what it needs; a service of no kind here fails."""
ON_SIMULATOR = "demo"
"""The profile whose services talk to its simulator service, not to Feishu."""
DEMO_AGENT = "showcase"
CREDENTIALS = ("FEISHU_APP_ID", "FEISHU_APP_SECRET", "FEISHU_APPS", "OPENAI_API_KEY",
               "CELERY_BROKER_URL", "FLOWER_BASIC_AUTH")


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def words(service: Service) -> list[str]:
    command = service.get("command", [])
    return shlex.split(" ".join(command) if isinstance(command, list) else command)


def kind_of(service: Service) -> str | None:
    line = " ".join([str(service.get("image")), *words(service)])
    return next((name for name, kind in KINDS.items() if re.search(kind.found_by, line)), None)


def port_of(service: Service) -> int | None:
    found = re.search(r"--port[= ](\d+)", " ".join(words(service)))
    return int(found.group(1)) if found else None


def env_of(service: Service) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def on_simulator(service: Service) -> bool:
    return ON_SIMULATOR in service.get("profiles", [])


def enabled_with(dependency: Service, service: Service) -> bool:
    """Compose enables `dependency` whenever it enables `service` (else it refuses)."""
    theirs = set(dependency.get("profiles", []))
    return not theirs or bool(service.get("profiles")) and set(service["profiles"]) <= theirs


def waits_healthy(service: Service, on: str) -> bool:
    return bool((service.get("depends_on") or {}).get(on, {}).get("condition")
                == "service_healthy")


def redis_problems(service: Service, services: dict[str, Service]) -> list[str]:
    url = env_of(service).get("REDIS_URL", "")
    host = urlsplit(url).hostname or ""
    if host not in services or kind_of(services[host]) != "redis":
        return [f"REDIS_URL {url!r} names no Redis service"]
    problems = [] if waits_healthy(service, host) else [f"does not wait for {host} healthy"]
    if on_simulator(service) and not on_simulator(services[host]):
        problems.append(f"shares {host} with production (its workers would take the turns)")
    return problems


def open_api_problems(service: Service, services: dict[str, Service],
                      accepts: Accepts) -> list[str]:
    env = env_of(service)
    if not on_simulator(service):  # Feishu itself (or FEISHU_DOMAIN in docker/.env)
        return ["FEISHU_DOMAIN written in the file"] if "FEISHU_DOMAIN" in env else []
    domain = urlsplit(env.get("FEISHU_DOMAIN", ""))
    sim = domain.hostname or ""
    if sim not in services or kind_of(services[sim]) != "simulator":
        return [f"FEISHU_DOMAIN {env.get('FEISHU_DOMAIN')!r} is no simulator"]
    problems = [] if waits_healthy(service, sim) else [f"does not wait for {sim} healthy"]
    if domain.port != port_of(services[sim]):
        problems.append(f"FEISHU_DOMAIN's port is not the one {sim} listens on")
    if not accepts(env.get("FEISHU_APP_ID", ""), env.get("FEISHU_APP_SECRET", "")):
        problems.append(f"{sim} refuses its FEISHU_APP_ID and FEISHU_APP_SECRET")
    return problems


def settings_problems(service: Service) -> list[str]:
    """Production reads its credentials from docker/.env, the demo reads nothing there."""
    reads_env = any(f == ".env" or isinstance(f, dict) and f.get("path") == ".env"
                    for f in service.get("env_file", []))
    if on_simulator(service):
        return ["reads docker/.env (production settings)"] if reads_env else []
    inline = sorted(set(CREDENTIALS) & set(env_of(service)))
    return ([f"credentials written in the file: {inline}"] if inline else []) + (
        [] if reads_env else ["does not read its credentials from docker/.env"])


def agent_problems(service: Service) -> list[str]:
    agent = env_of(service).get("GATEWAY_AGENT", "echo")
    problems = []
    if on_simulator(service) and agent != DEMO_AGENT:
        problems.append(f"runs GATEWAY_AGENT={agent}, not {DEMO_AGENT}")
    try:
        load_factory(agent)
    except SettingsError as error:
        problems.append(str(error))
    return problems


def problems_of(name: str, services: dict[str, Service], accepts: Accepts) -> list[str]:
    service = services[name]
    kind = kind_of(service)
    if kind is None:
        return ["of no kind in KINDS"]
    health = " ".join(service.get("healthcheck", {}).get("test", []))
    problems = [] if KINDS[kind].health.format(port=port_of(service)) in health else [
        f"its healthcheck does not run {KINDS[kind].health}"]
    for dependency in service.get("depends_on") or {}:
        other = services.get(dependency)
        if other is None or not enabled_with(other, service):
            problems.append(f"depends on {dependency}, not enabled with it")
        elif not waits_healthy(service, dependency) or "healthcheck" not in other:
            problems.append(f"starts before {dependency} is healthy")
    checks: dict[str, Callable[[], list[str]]] = {
        "redis": lambda: redis_problems(service, services),
        "broker": lambda: redis_problems(service, services),
        "open-api": lambda: open_api_problems(service, services, accepts),
        "settings": lambda: settings_problems(service),
        "agent": lambda: agent_problems(service)}
    return problems + [found for need in KINDS[kind].needs for found in checks[need]()]


def post_json(url: str, body: dict[str, str]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:  # a refusal: its code is in the JSON body
        with error:
            return json.loads(error.read())


@pytest.fixture(scope="module")
def simulator_accepts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accepts]:
    """The simulator service's own command, on a free loopback port: whether it hands a
    token and a long connection to these app credentials."""
    program, *args = words(compose()["services"]["simulator"])
    assert program == "feishu-gateway" and "--host" in args and "--port" in args
    args = [{"--host": "127.0.0.1", "--port": "0"}.get(before, arg)
            for before, arg in zip(["", *args], args, strict=False)]
    sim = GatewayProcess("simulator", ["-m", "gateway.ops.cli", *args], {},
                         tmp_path_factory.mktemp("sim"))
    try:
        def listening() -> str:
            assert sim.alive, f"the simulator's command failed:\n{sim.tail()}"
            return next(iter(re.findall(r"http://127\.0\.0\.1:[1-9]\d*", sim.log())), "")

        domain = str(wait_until(listening, 30, "the simulator to listen"))

        def accepts(app_id: str, secret: str) -> bool:
            token = post_json(f"{domain}/open-apis/auth/v3/tenant_access_token/internal",
                              {"app_id": app_id, "app_secret": secret})
            stream = post_json(f"{domain}/callback/ws/endpoint",
                               {"AppID": app_id, "AppSecret": secret})
            return bool(token["code"] == 0 and stream["code"] == 0)

        assert not accepts("cli_sim_app", "not-the-secret")
        yield accepts
    finally:
        sim.stop()


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    schema = json.loads((ROOT / "tests" / "data" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator(schema).validate(compose())  # the schema says draft-07


def test_every_service_of_every_profile_has_what_its_kind_needs(
        simulator_accepts: Accepts) -> None:
    services = compose()["services"]
    problems = {name: found for name in services
                if (found := problems_of(name, services, simulator_accepts))}
    assert problems == {}
    demo = {kind_of(s) for s in services.values() if on_simulator(s)}
    assert demo == {"redis", "simulator", "listener", "worker"}


def test_production_splits_the_queues_and_says_what_redis_may_lose() -> None:
    services = compose()["services"]
    assert {"redis", "listener", "webhook", "worker", "worker-low", "flower"} <= set(services)
    assert "gateway.turns" in services["worker"]["command"]
    assert "gateway.release" in services["worker-low"]["command"]
    command = services["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    fsync = command[command.index("--appendfsync") + 1] if "--appendfsync" in command else ""
    if fsync != "always":  # everysec (Redis's default): what it may lose is said beside it
        said = COMPOSE.read_text().split("\n  redis:\n")[0].rsplit("\nservices:\n")[-1]
        assert "power loss" in said and "GATEWAY_DURABLE_ACK=aof" in said


def test_flower_needs_auth_and_nothing_listens_beyond_loopback() -> None:
    services = compose()["services"]
    assert "FLOWER_BASIC_AUTH" in " ".join(services["flower"]["command"])
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} to all"
    text = COMPOSE.read_text(encoding="utf-8").replace("FEISHU_APP_SECRET: sim-secret", "")
    assert not re.search(r"(SECRET|PASSWORD|TOKEN)\s*[:=]\s*\S", text), "a credential"


def test_metrics_are_served_inside_and_the_dashboard_reads_only_series_we_export() -> None:
    services = compose()["services"]
    assert services["listener"]["environment"]["GATEWAY_METRICS_PORT"]
    for name in ("worker", "worker-low"):
        env = services[name]["environment"]
        assert env["GATEWAY_WORKER_METRICS_PORT"] and env["PROMETHEUS_MULTIPROC_DIR"]
    assert "PROMETHEUS_MULTIPROC_DIR" not in services["listener"]["environment"]
    dashboard = json.loads((ROOT / "docker" / "grafana-dashboard.json").read_text())
    exported = set(re.findall(r'"(gateway_[a-z_]+)"',
                              (ROOT / "gateway" / "core" / "metrics.py").read_text()))
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"gateway_[a-z_]+", target["expr"])}
    suffixes = ("_bucket", "_count", "_sum", "_total")

    def known(series: str) -> bool:
        return series in exported or any(
            series.endswith(s) and series.removesuffix(s) in exported for s in suffixes)

    assert used and {u for u in used if not known(u)} == set()

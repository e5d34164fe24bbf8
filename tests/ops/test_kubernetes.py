"""deploy/kubernetes/ rendered (base and each overlay, as kustomize builds them:
tests/support/kustomize.py) and validated against the Kubernetes schemas of the version the
docs state (the kubernetes-validate package's, strict: an unknown field fails) and KEDA's
own CRD schemas (tests/data/keda/); then what each part needs to work, read off the
manifests: the commands, queues, probes, grace periods, credentials and scaling."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from gateway.broker.names import RELEASE_QUEUE, TURNS_QUEUE
from gateway.core.settings import load_settings
from tests.support.kustomize import Doc, containers, render

INGRESS_NGINX_UPSTREAM_IDLE_S = 60.0
"""How long ingress-nginx keeps an idle connection to a pod (`upstream-keepalive-timeout`)."""

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30.0"
"""The oldest Kubernetes the manifests are for (docs/scaling.md says so)."""
KEDA_SCHEMAS = ROOT / "tests" / "data" / "keda"
BUILDS = {"base": DEPLOY / "base", "keda": DEPLOY / "overlays" / "keda",
          "webhook": DEPLOY / "overlays" / "webhook"}
CREDENTIALS = ("FEISHU_APP_ID", "FEISHU_APP_SECRET", "FEISHU_APPS", "REDIS_URL",
               "CELERY_BROKER_URL", "OPENAI_API_KEY", "FEISHU_VERIFICATION_TOKEN",
               "FEISHU_ENCRYPT_KEY")


def build(name: str) -> dict[tuple[str, str], Doc]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in render(BUILDS[name])}


def strict(schema: Any) -> Any:
    """A CRD's schema as the API server applies it with strict field validation: a field
    the schema does not name is refused (unless the schema keeps unknown fields)."""
    if isinstance(schema, dict):
        out = {key: strict(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    return schema


def validate(doc: Doc) -> None:
    group = doc["apiVersion"].split("/")[0]
    if group == "keda.sh":
        schema = json.loads((KEDA_SCHEMAS / f"{doc['kind']}-v1alpha1.json").read_text())
        jsonschema.validate(doc, strict(schema))
        return
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_manifest_validates_against_the_stated_kubernetes(name: str) -> None:
    docs = render(BUILDS[name])
    assert docs
    for doc in docs:
        validate(doc)


def test_the_validation_refuses_what_a_cluster_would() -> None:
    """The checks above can fail: a misspelt field, a wrong type, an unknown KEDA field."""
    listener = build("base")[("Deployment", "listener")]
    typo = json.loads(json.dumps(listener))
    typo["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(typo)
    wrong = json.loads(json.dumps(listener))
    wrong["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(wrong)
    scaled = json.loads(json.dumps(build("keda")[("ScaledObject", "worker")]))
    scaled["spec"]["maxReplicas"] = 16
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)


def command(doc: Doc) -> str:
    [container] = containers(doc)
    return " ".join(container["command"])


def probes(doc: Doc) -> list[str]:
    [container] = containers(doc)
    return [" ".join(container[probe]["exec"]["command"])
            for probe in ("startupProbe", "livenessProbe", "readinessProbe") if probe in container]


def test_the_listener_runs_two_or_more_spread_and_kept_by_a_disruption_budget() -> None:
    for name in BUILDS:
        docs = build(name)
        listener = docs[("Deployment", "listener")]
        assert listener["spec"]["replicas"] >= 2
        assert listener["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        budget = docs[("PodDisruptionBudget", "listener")]
        assert budget["spec"]["minAvailable"] >= 1
        assert budget["spec"]["selector"]["matchLabels"].items() <= \
            listener["spec"]["template"]["metadata"]["labels"].items()
        assert set(probes(listener)) == {"feishu-gateway health listener"}
        want = "feishu-gateway serve" if name == "webhook" else "feishu-gateway listen"
        assert command(listener) == want


def test_workers_take_the_turns_queue_and_the_release_worker_the_low_queue() -> None:
    docs = build("base")
    assert re.fullmatch(rf"celery -A tasks worker -Q {re.escape(TURNS_QUEUE)}",
                        command(docs[("Deployment", "worker")]))
    release = docs[("Deployment", "worker-release")]
    assert command(release) == f"celery -A tasks worker -Q {RELEASE_QUEUE} -c 1"
    for doc in (docs[("Deployment", "worker")], release):
        assert set(probes(doc)) == {"feishu-gateway health worker"}


def test_grace_periods_fit_the_warm_shutdown() -> None:
    """A listener stops within 10 s (docs/operating.md); a worker hands back what waits at
    once, then waits for agents' releases (GATEWAY_AGENT_RELEASE_TIMEOUT_S) and for an agent
    that ignores turn.cancelled(): the grace leaves a minute for that."""
    defaults = load_settings()
    docs = build("base")
    grace = {name: docs[("Deployment", name)]["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"] for name in ("listener", "worker", "worker-release")}
    assert grace["listener"] >= 10 + 10
    assert grace["worker"] >= defaults.agent_release_timeout_s + 60
    assert grace["worker-release"] >= defaults.agent_release_timeout_s + 30


def test_credentials_come_from_the_secret_and_nowhere_else() -> None:
    for name in BUILDS:
        for doc in build(name).values():
            if doc["kind"] == "ConfigMap":
                assert not set(doc["data"]) & set(CREDENTIALS), doc["metadata"]["name"]
            for container in containers(doc):
                named = {e["name"] for e in container.get("env", [])}
                assert not named & set(CREDENTIALS), (doc["metadata"]["name"], named)
                refs = [e["secretRef"]["name"] for e in container.get("envFrom", [])
                        if "secretRef" in e]
                assert refs == ["feishu-gateway"], doc["metadata"]["name"]


def test_workers_scale_on_cpu_in_the_base_and_on_the_turns_queue_with_keda() -> None:
    base = build("base")
    hpa = base[("HorizontalPodAutoscaler", "worker")]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "worker"
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    keda = build("keda")
    assert ("HorizontalPodAutoscaler", "worker") not in keda  # KEDA owns the workers' HPA
    scaled = keda[("ScaledObject", "worker")]
    assert scaled["spec"]["scaleTargetRef"]["name"] == "worker"
    [redis] = [t for t in scaled["spec"]["triggers"] if t["type"] == "redis"]
    assert redis["metadata"]["listName"] == TURNS_QUEUE
    auth = keda[("TriggerAuthentication", redis["authenticationRef"]["name"])]
    assert {ref["name"] for ref in auth["spec"]["secretTargetRef"]} == {"feishu-gateway"}


def test_webhook_mode_is_served_behind_a_service_and_an_ingress_on_its_path() -> None:
    docs = build("webhook")
    [container] = containers(docs[("Deployment", "listener")])
    env = {e["name"]: e["value"] for e in container["env"]}
    port = int(env["FEISHU_WEBHOOK_PORT"])
    assert {p["containerPort"] for p in container["ports"]} >= {port}
    service = docs[("Service", "webhook")]
    assert service["spec"]["selector"].items() <= \
        docs[("Deployment", "listener")]["spec"]["template"]["metadata"]["labels"].items()
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[service["spec"]["ports"][0]["targetPort"]] == port
    [rule] = docs[("Ingress", "webhook")]["spec"]["rules"]
    [path] = rule["http"]["paths"]
    assert path["path"] == load_settings().webhook_path
    assert path["backend"]["service"]["name"] == "webhook"
    # the ingress (ingress-nginx: upstream-keepalive-timeout 60 s) closes an idle connection
    # to a pod before the pod does, so no push is written to a connection being closed
    assert docs[("Ingress", "webhook")]["spec"]["ingressClassName"] == "nginx"
    keepalive_s = float(env.get("FEISHU_WEBHOOK_KEEPALIVE_S",
                                load_settings(_env_file=None).webhook_keepalive_s))
    assert keepalive_s > INGRESS_NGINX_UPSTREAM_IDLE_S


def test_a_pod_is_restarted_only_after_five_minutes_unhealthy() -> None:
    """Every process waits out an outage of Feishu, Redis or the broker by itself: its
    liveness probe gives it five minutes before a restart, and so does its startup probe."""
    for name in BUILDS:
        for doc in build(name).values():
            for container in containers(doc):
                live, start = container["livenessProbe"], container["startupProbe"]
                assert live["periodSeconds"] * live["failureThreshold"] >= 300, \
                    doc["metadata"]["name"]
                assert start["periodSeconds"] * start["failureThreshold"] >= 300, \
                    doc["metadata"]["name"]


def test_every_object_of_every_build_is_in_the_gateway_namespace() -> None:
    """An overlay's own objects too: a ScaledObject, a Service or a TriggerAuthentication in
    another namespace finds no Deployment, no pods and no Secret."""
    for name in BUILDS:
        for doc in build(name).values():
            if doc["kind"] != "Namespace":
                assert doc["metadata"].get("namespace") == "feishu-gateway", \
                    (name, doc["kind"], doc["metadata"]["name"])


def test_the_workers_replicas_are_the_autoscalers_alone() -> None:
    """An apply never resets what the HPA or KEDA chose (and stops busy pods doing so)."""
    for name in BUILDS:
        assert "replicas" not in build(name)[("Deployment", "worker")]["spec"]


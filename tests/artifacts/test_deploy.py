"""deploy/: each overlay renders with `kubectl kustomize`, passes the strict Kubernetes schemas
of the versions it targets and the prometheus-operator schemas, meets Pod Security "restricted",
and carries the sidecar, probes, Service, PodMonitor and generated parts the issue specifies."""

from __future__ import annotations

import copy
import json
from functools import cache

import pytest
from required_tools import missing, require
from specdec_artifacts import deploycheck
from specdec_artifacts.alertmanager import alertmanager_config_resource
from specdec_artifacts.consistency import deploy_problems
from specdec_artifacts.dashboard import dashboard
from specdec_artifacts.deploycheck import (
    OVERLAYS,
    Manifest,
    Overlay,
    ToolMissingError,
    find,
    pod_spec,
)
from specdec_artifacts.kube import speculative_config_map
from specdec_artifacts.rules import rule_groups
from specdec_artifacts.settings import load

SIDECAR_IMAGE = "ghcr.io/vllm-specdec-exporter/vllm-specdec-exporter:0.1.0"
SIDECAR_ARGS = ["run", "--vllm-url", "http://127.0.0.1:8000", "--listen", "0.0.0.0:10088",
                "--proxy-listen", "0.0.0.0:8080"]
BASE, LEGACY = OVERLAYS


@cache
def _rendered(overlay: Overlay) -> tuple[Manifest, ...]:
    return tuple(deploycheck.render(overlay.path))


def rendered(overlay: Overlay) -> list[Manifest]:
    require("kubectl")
    return copy.deepcopy(list(_rendered(overlay)))


def sidecar(manifests: list[Manifest]) -> tuple[str, Manifest]:
    """("initContainers" or "containers", the sidecar container)."""
    pod = pod_spec(find(manifests, "Deployment", "vllm"))
    assert pod is not None
    for where in ("initContainers", "containers"):
        for container in pod.get(where, []):
            if container["name"] == "specdec-exporter":
                return where, container
    raise AssertionError("no specdec-exporter container")


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda o: o.path.name)
def test_kustomize_renders_every_part(overlay: Overlay) -> None:
    kinds = sorted(m["kind"] for m in rendered(overlay))
    assert kinds == ["AlertmanagerConfig", "ConfigMap", "ConfigMap", "Deployment", "PodMonitor",
                     "PrometheusRule", "Service"]


@pytest.mark.parametrize(("overlay", "version"),
                         [(o, v) for o in OVERLAYS for v in o.kubernetes_versions],
                         ids=lambda x: x if isinstance(x, str) else x.path.name)
def test_builtin_kinds_pass_the_strict_kubernetes_schema(overlay: Overlay, version: str) -> None:
    assert deploycheck.builtin_schema_problems(rendered(overlay), version) == []


def test_the_native_sidecar_does_not_validate_on_kubernetes_1_25() -> None:
    """Negative control: strict schemas do reject fields a version does not know."""
    problems = deploycheck.builtin_schema_problems(rendered(BASE), "1.25")
    assert any("restartPolicy" in p for p in problems)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda o: o.path.name)
def test_monitoring_resources_pass_the_prometheus_operator_schemas(overlay: Overlay) -> None:
    assert crd_problems(rendered(overlay)) == []


def test_the_crd_check_catches_a_bad_duration_and_a_missing_field() -> None:
    manifests = rendered(BASE)
    find(manifests, "PodMonitor", "vllm-specdec")["spec"]["podMetricsEndpoints"][0][
        "interval"] = "15 seconds"
    del find(manifests, "PrometheusRule", "specdec")["spec"]["groups"][0]["name"]

    problems = crd_problems(manifests)

    assert any("PodMonitor/vllm-specdec" in p and "interval" in p for p in problems)
    assert any("PrometheusRule/specdec" in p and "name" in p for p in problems)


def crd_problems(manifests: list[Manifest]) -> list[str]:
    try:
        return deploycheck.crd_schema_problems(manifests)
    except ToolMissingError as exc:
        missing(str(exc))
        raise


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda o: o.path.name)
def test_every_container_meets_pod_security_restricted(overlay: Overlay) -> None:
    assert deploycheck.restricted_problems(rendered(overlay)) == []


def test_the_restricted_check_catches_a_writable_root_and_kept_capabilities() -> None:
    manifests = rendered(BASE)
    _, container = sidecar(manifests)
    container["securityContext"]["readOnlyRootFilesystem"] = False
    container["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}

    problems = deploycheck.restricted_problems(manifests)

    assert problems == [
        "Deployment/vllm container specdec-exporter: does not drop ALL capabilities",
        "Deployment/vllm container specdec-exporter: root filesystem is writable",
    ]


def test_base_runs_the_sidecar_as_a_native_sidecar() -> None:
    where, container = sidecar(rendered(BASE))
    assert where == "initContainers"
    assert container["restartPolicy"] == "Always"


def test_legacy_overlay_runs_the_same_sidecar_as_a_plain_container() -> None:
    legacy = rendered(LEGACY)
    where, container = sidecar(legacy)
    _, native = sidecar(rendered(BASE))
    assert where == "containers"
    pod = pod_spec(find(legacy, "Deployment", "vllm"))
    assert pod is not None and "initContainers" not in pod
    del native["restartPolicy"]
    assert container == native


def test_the_sidecar_command_image_probes_and_resources() -> None:
    _, container = sidecar(rendered(BASE))
    assert container["image"] == SIDECAR_IMAGE
    assert container["command"] + container["args"] == ["specdec-exporter", *SIDECAR_ARGS]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"specdec-metrics": 10088, "tap": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "specdec-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "specdec-metrics"}
    assert "cpu" not in container["resources"]["limits"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])


def test_the_service_sends_clients_through_the_tap() -> None:
    service = find(rendered(BASE), "Service", "vllm")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "tap", "protocol": "TCP"}]


def test_the_podmonitor_scrapes_the_sidecar_as_the_job_the_alerts_select() -> None:
    monitor = find(rendered(BASE), "PodMonitor", "vllm-specdec")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    jobs = {e["port"]: e["relabelings"][0]["replacement"]
            for e in monitor["spec"]["podMetricsEndpoints"]}
    assert jobs == {"specdec-metrics": "specdec-exporter", "http": "vllm"}
    selectors = load().selectors
    assert selectors.sidecar == f'job="{jobs["specdec-metrics"]}"'
    assert selectors.vllm == f'job="{jobs["http"]}"'


def test_generated_parts_match_their_sources() -> None:
    manifests, settings = rendered(BASE), load()
    rule = find(manifests, "PrometheusRule", "specdec")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == rule_groups(settings)
    config_map = find(manifests, "ConfigMap", "specdec-grafana-dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["vllm-specdec.json"]) == dashboard(settings)
    assert find(manifests, "AlertmanagerConfig", "specdec") == alertmanager_config_resource(
        settings)
    assert find(manifests, "ConfigMap", "vllm-speculative") == speculative_config_map(
        settings.example_deployment)


def test_the_rendered_deployment_takes_both_methods_from_the_config_map() -> None:
    manifests, settings = rendered(BASE), load()
    assert deploy_problems(settings, manifests) == []
    _, container = sidecar(manifests)
    container["env"] = [{"name": "SPECDEC_SPECULATIVE_METHOD", "value": "eagle3"}]
    assert len(deploy_problems(settings, manifests)) == 1

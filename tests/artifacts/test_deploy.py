"""deploy/: the components inject the sidecar into foreign workloads and change nothing else; the
monitoring kustomization holds no workload; the examples are built from both; every rendering
passes the strict Kubernetes schemas of its versions, the prometheus-operator schemas and Pod
Security "restricted"."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pod_faults
import pytest
import yaml
from required_tools import missing, require
from specdec_artifacts import deploycheck
from specdec_artifacts.alertmanager import alertmanager_config_resource
from specdec_artifacts.consistency import deploy_problems
from specdec_artifacts.dashboard import dashboard
from specdec_artifacts.deploycheck import (
    COMPONENTS,
    EXAMPLE,
    KUSTOMIZATIONS,
    LEGACY_EXAMPLE,
    LEGACY_VERSIONS,
    MONITORING,
    NATIVE_SIDECAR_VERSIONS,
    Kustomization,
    Manifest,
    ToolMissingError,
    find,
    pod_spec,
)
from specdec_artifacts.kube import speculative_config_map
from specdec_artifacts.rules import rule_groups
from specdec_artifacts.settings import load

from specdec_exporter import __version__
from specdec_exporter.sidecar.config import DEFAULT_PORT, Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deploy"
INJECT_LABEL = "specdec-exporter.io/inject"
SIDECAR = "specdec-exporter"
IMAGE = "ghcr.io/vllm-specdec-exporter/vllm-specdec-exporter"


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def injection_patch() -> Manifest:
    """deploy/components/sidecar/sidecar.yaml: everything the sidecar component adds."""
    patch: Manifest = _load_yaml(COMPONENTS / "sidecar" / "sidecar.yaml")
    return patch


def injected_labels() -> dict[str, str]:
    labels: dict[str, str] = injection_patch()["spec"]["template"]["metadata"]["labels"]
    return labels


def tap_patches() -> tuple[Manifest, list[Manifest]]:
    """The tap component's two patches: (the workload patch, the Service's JSON patch ops)."""
    patches = _load_yaml(COMPONENTS / "tap" / "kustomization.yaml")["patches"]
    workload, service = (yaml.safe_load(p["patch"]) for p in patches)
    return workload, service


def tap_port() -> int:
    _, ops = tap_patches()
    (op,) = ops
    assert op["path"] == "/spec/ports/0/targetPort"
    port: int = op["value"]
    return port


@cache
def _rendered(path: Path) -> tuple[Manifest, ...]:
    return tuple(deploycheck.render(path))


def rendered(path: Path) -> list[Manifest]:
    require("kubectl")
    return copy.deepcopy(list(_rendered(path)))


def crd_problems(manifests: list[Manifest]) -> list[str]:
    try:
        return deploycheck.crd_schema_problems(manifests)
    except ToolMissingError as exc:
        missing(str(exc))
        raise


def sidecar_of(workload: Manifest) -> tuple[str, Manifest]:
    """("initContainers" or "containers", the sidecar container) of one workload."""
    pod = pod_spec(workload)
    assert pod is not None
    found = [
        (where, c)
        for where in ("initContainers", "containers")
        for c in pod.get(where, [])
        if c["name"] == SIDECAR
    ]
    assert len(found) == 1, f"{len(found)} sidecars in {workload['metadata']['name']}"
    return found[0]


def env_of(container: Manifest) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


# --- the components against workloads they have never seen -------------------------------------


@dataclass(frozen=True)
class Case:
    fixture: str
    """A folder of tests/fixtures/deploy: a team's own kustomization."""
    components: tuple[str, ...]
    vllm_port: int
    """The port the team's vLLM listens on, given to the sidecar by the team's own patch."""

    @property
    def versions(self) -> tuple[str, ...]:
        legacy = "legacy-sidecar" in self.components
        return LEGACY_VERSIONS if legacy else NATIVE_SIDECAR_VERSIONS

    @property
    def id(self) -> str:
        return f"{self.fixture}+{'+'.join(self.components)}"


CASES = [
    Case("chat", ("sidecar",), 9000),
    Case("chat", ("sidecar", "tap"), 9000),
    Case("chat", ("sidecar", "tap", "legacy-sidecar"), 9000),
    Case("codegen", ("sidecar",), 8001),
    Case("codegen", ("sidecar", "tap"), 8001),
    Case("codegen", ("sidecar", "legacy-sidecar"), 8001),
]


def user_kustomization(case: Case, root: Path) -> Path:
    """What a team writes: its manifests, our components, and its own settings for the sidecar
    (vLLM's port). Natively a patch of the kustomization; with legacy-sidecar a component of its
    own before legacy-sidecar, because kustomize's strategic merge moves a patched container to
    the front of its list, and the sidecar must stay after the team's containers."""
    settings = {
        "target": {"kind": "Deployment|StatefulSet", "labelSelector": f"{INJECT_LABEL}=true"},
        "patch": yaml.safe_dump(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "any"},
                "spec": {
                    "template": {
                        "spec": {
                            "initContainers": [
                                {
                                    "name": SIDECAR,
                                    "env": [
                                        {
                                            "name": "SPECDEC_VLLM_URL",
                                            "value": f"http://127.0.0.1:{case.vllm_port}",
                                        }
                                    ],
                                }
                            ]
                        }
                    }
                },
            }
        ),
    }
    components = [COMPONENTS / name for name in case.components]
    if "legacy-sidecar" not in case.components:
        return write_kustomization(
            root / case.id,
            resources=[FIXTURES / case.fixture],
            components=components,
            patches=[settings],
        )
    own = root / f"{case.id}-settings"
    own.mkdir()
    (own / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1alpha1",
                "kind": "Component",
                "patches": [settings],
            }
        ),
        encoding="utf-8",
    )
    components.insert(-1, own)
    return write_kustomization(
        root / case.id, resources=[FIXTURES / case.fixture], components=components
    )


def write_kustomization(
    folder: Path,
    *,
    resources: list[Path],
    components: list[Path],
    patches: list[Manifest] | None = None,
) -> Path:
    """A kustomization in `folder` (kustomize takes other folders only as relative paths)."""
    folder.mkdir(parents=True, exist_ok=True)
    document: Manifest = {
        "resources": [os.path.relpath(path, folder) for path in resources],
        "components": [os.path.relpath(path, folder) for path in components],
    }
    if patches:
        document["patches"] = patches
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Manifest]]:
    require("kubectl")
    root = tmp_path_factory.mktemp("kustomizations")
    return {case.id: deploycheck.render(user_kustomization(case, root)) for case in CASES}


def key(manifest: Manifest) -> tuple[str, str, str]:
    meta = manifest["metadata"]
    return manifest["kind"], meta.get("namespace", ""), meta["name"]


def opted_in(manifest: Manifest) -> bool:
    return bool(manifest["metadata"].get("labels", {}).get(INJECT_LABEL) == "true")


def undo_injection(rendered: Manifest, original: Manifest, *, tap: bool) -> Manifest:
    """`rendered` minus exactly what the components declare, asserting each piece was there."""
    result = copy.deepcopy(rendered)
    if not opted_in(result):
        return result
    pod = pod_spec(result)
    if pod is not None:
        labels = result["spec"]["template"]["metadata"]["labels"]
        for name, value in injected_labels().items():
            assert labels.pop(name) == value
        sidecar_of(result)  # exactly one
        for where in ("initContainers", "containers"):
            pod[where] = [c for c in pod.get(where, []) if c["name"] != SIDECAR]
        if not pod["initContainers"]:  # [] and absent are the same pod to the API server
            del pod["initContainers"]
    elif result["kind"] == "Service" and tap:
        port = result["spec"]["ports"][0]
        assert port.pop("targetPort") == tap_port()
        if "targetPort" in original["spec"]["ports"][0]:
            port["targetPort"] = original["spec"]["ports"][0]["targetPort"]
    return result


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_nothing_of_the_users_changes_but_the_injection(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    originals = {key(m): m for m in rendered(FIXTURES / case.fixture)}
    results = {key(m): m for m in renderings[case.id]}
    assert results.keys() == originals.keys()  # no object added or dropped
    tap = "tap" in case.components
    for name, result in results.items():
        assert undo_injection(result, originals[name], tap=tap) == originals[name], name


def test_the_comparison_sees_a_change_to_a_users_container(
    renderings: dict[str, list[Manifest]],
) -> None:
    """Negative control: one changed argument of the team's vLLM is not part of the injection."""
    result = copy.deepcopy(find(renderings["chat+sidecar"], "Deployment", "chat-llm"))
    original = find(rendered(FIXTURES / "chat"), "Deployment", "chat-llm")
    pod = pod_spec(result)
    assert pod is not None
    pod["containers"][0]["args"].append("--max-num-seqs=64")
    assert undo_injection(result, original, tap=False) != original


@pytest.mark.parametrize(
    ("case", "version"),
    [(c, v) for c in CASES for v in c.versions],
    ids=lambda x: x if isinstance(x, str) else x.id,
)
def test_each_rendering_passes_the_strict_kubernetes_schema(
    case: Case, version: str, renderings: dict[str, list[Manifest]]
) -> None:
    assert deploycheck.builtin_schema_problems(renderings[case.id], version) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_sidecar_meets_pod_security_restricted_in_any_pod(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    """The team's pods set no restricted context of their own (chat) or part of it (codegen):
    the sidecar's own securityContext is enough."""
    problems = deploycheck.restricted_problems(renderings[case.id])
    assert [p for p in problems if f"container {SIDECAR}:" in p] == []
    assert problems  # the teams' own containers are not restricted: the check did look


def test_the_native_sidecar_comes_first_among_the_users_init_containers(
    renderings: dict[str, list[Manifest]],
) -> None:
    pod = pod_spec(find(renderings["chat+sidecar"], "Deployment", "chat-llm"))
    assert pod is not None
    assert [c["name"] for c in pod["initContainers"]] == [SIDECAR, "fetch-weights"]
    assert pod["initContainers"][0]["restartPolicy"] == "Always"


def test_the_legacy_sidecar_is_the_same_container_after_the_users(
    renderings: dict[str, list[Manifest]],
) -> None:
    native = find(renderings["chat+sidecar+tap"], "Deployment", "chat-llm")
    legacy = find(renderings["chat+sidecar+tap+legacy-sidecar"], "Deployment", "chat-llm")
    where, container = sidecar_of(legacy)
    pod = pod_spec(legacy)
    assert pod is not None
    assert where == "containers"
    assert [c["name"] for c in pod["containers"]] == ["server", "log-shipper", SIDECAR]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-weights"]
    native_container = copy.deepcopy(sidecar_of(native)[1])  # the fixture is shared
    del native_container["restartPolicy"]
    assert container == native_container


def test_the_legacy_component_refuses_to_move_anything_but_the_sidecar(tmp_path: Path) -> None:
    require("kubectl")
    folder = write_kustomization(
        tmp_path, resources=[FIXTURES / "chat"], components=[COMPONENTS / "legacy-sidecar"]
    )
    with pytest.raises(ValueError, match="test failed"):
        deploycheck.render(folder)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_teams_patch_points_the_sidecar_at_its_vllm(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    for workload in filter(opted_in, renderings[case.id]):
        if pod_spec(workload) is not None:
            _, container = sidecar_of(workload)
            assert env_of(container)["SPECDEC_VLLM_URL"] == f"http://127.0.0.1:{case.vllm_port}"


@pytest.mark.parametrize("case", [c for c in CASES if "tap" in c.components], ids=lambda c: c.id)
def test_the_tap_listens_where_the_service_now_points(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    manifests = renderings[case.id]
    (service,) = [m for m in manifests if m["kind"] == "Service" and opted_in(m)]
    (workload,) = [m for m in manifests if pod_spec(m) is not None and opted_in(m)]
    _, container = sidecar_of(workload)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] == ports["specdec-tap"] == tap_port()
    assert env_of(container)["SPECDEC_PROXY_LISTEN"] == f"0.0.0.0:{tap_port()}"


def test_without_the_tap_component_there_is_no_tap(renderings: dict[str, list[Manifest]]) -> None:
    _, container = sidecar_of(find(renderings["codegen+sidecar"], "StatefulSet", "codegen"))
    assert "SPECDEC_PROXY_LISTEN" not in env_of(container)
    assert [p["name"] for p in container["ports"]] == ["specdec-metrics"]


# --- a sidecar fault never takes vLLM out of service (issue 26, section 6) ----------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_no_sidecar_fault_can_hold_vllms_start_or_its_pods_readiness(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    """Before: `run` as the container's process (exit 64 on a bad setting: vLLM never starts),
    a liveness probe, and a readiness probe on /readyz without the tap (503 until a poll)."""
    workloads = [m for m in renderings[case.id] if pod_spec(m) is not None and opted_in(m)]
    assert workloads
    for workload in workloads:
        assert pod_faults.fault_problems(workload) == [], workload["metadata"]["name"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_failure_matrix_says_what_each_rendering_does(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    rows = pod_faults.matrix_rows()
    for workload in [m for m in renderings[case.id] if pod_spec(m) is not None and opted_in(m)]:
        assert pod_faults.matrix_problems(workload, rows) == []


def test_the_fault_check_sees_what_took_the_pod_down() -> None:
    """Negative control: the sidecar as it was before, and a matrix row that says otherwise."""
    workload = copy.deepcopy(injection_patch())
    (sidecar,) = workload["spec"]["template"]["spec"]["initContainers"]
    sidecar.update(
        command=[SIDECAR],
        args=["run"],
        livenessProbe={"httpGet": {"path": "/healthz", "port": "specdec-metrics"}},
        readinessProbe={"httpGet": {"path": "/readyz", "port": "specdec-metrics"}},
    )
    problems = pod_faults.fault_problems(workload)
    assert [problem.split(":")[0] for problem in problems] == [
        "its process is not the keeper",
        "a liveness probe restarts the container on a hang",
        "a readiness probe without the tap",
    ]
    rows = pod_faults.matrix_rows()
    rows[("hang", "probe-only")] = {**rows[("hang", "probe-only")], "vLLM's pod": "NotReady"}
    assert pod_faults.matrix_problems(workload, rows) == [
        "hang / probe-only: the matrix says 'NotReady'"
    ]


# --- what the sidecar component declares --------------------------------------------------------


def test_the_injection_is_one_label_and_one_init_container() -> None:
    patch = injection_patch()
    template = patch["spec"]["template"]
    assert patch["spec"].keys() == {"template"}
    assert template.keys() == {"metadata", "spec"}
    assert template["metadata"].keys() == {"labels"}
    assert template["spec"].keys() == {"initContainers"}
    assert [c["name"] for c in template["spec"]["initContainers"]] == [SIDECAR]
    assert injected_labels() == {"specdec-exporter.io/sidecar": "true"}


def test_the_tap_component_touches_only_the_sidecar_and_the_services_target_port() -> None:
    workload, ops = tap_patches()
    assert workload["spec"]["template"]["spec"].keys() == {"initContainers"}
    assert [c["name"] for c in workload["spec"]["template"]["spec"]["initContainers"]] == [SIDECAR]
    assert [(op["op"], op["path"]) for op in ops] == [("add", "/spec/ports/0/targetPort")]


def test_the_sidecar_container_image_command_probes_and_resources() -> None:
    (container,) = injection_patch()["spec"]["template"]["spec"]["initContainers"]
    assert container["image"] == f"{IMAGE}:{__version__}"
    assert container["restartPolicy"] == "Always"
    assert container["command"] + container["args"] == pod_faults.KEEPER
    assert env_of(container) == {"SPECDEC_VLLM_URL": Settings().vllm_url}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "specdec-metrics": DEFAULT_PORT
    }
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & container.keys()
    assert "cpu" not in container["resources"]["limits"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])


# --- deploy/monitoring --------------------------------------------------------------------------


def test_monitoring_holds_no_workload() -> None:
    kinds = sorted(m["kind"] for m in rendered(MONITORING.path))
    assert kinds == ["ConfigMap", "PodMonitor", "PrometheusRule"]


def test_the_alertmanager_component_adds_only_the_alertmanagerconfig(tmp_path: Path) -> None:
    folder = write_kustomization(
        tmp_path, resources=[MONITORING.path], components=[MONITORING.path / "alertmanager"]
    )
    with_routing = rendered(folder)
    assert sorted(map(key, with_routing)) == sorted(
        [*map(key, rendered(MONITORING.path)), ("AlertmanagerConfig", "", "specdec")]
    )
    assert crd_problems(with_routing) == []
    assert find(with_routing, "AlertmanagerConfig", "specdec") == alertmanager_config_resource(
        load()
    )


def test_the_podmonitor_scrapes_injected_pods_in_any_namespace_as_the_alerts_job() -> None:
    monitor = find(rendered(MONITORING.path), "PodMonitor", "specdec-exporter")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["selector"] == {"matchLabels": injected_labels()}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "specdec-metrics"
    assert load().selectors.sidecar == f'job="{endpoint["relabelings"][0]["replacement"]}"'


def test_generated_parts_match_their_sources() -> None:
    manifests, settings = rendered(MONITORING.path), load()
    rule = find(manifests, "PrometheusRule", "specdec")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == rule_groups(settings)
    config_map = find(manifests, "ConfigMap", "specdec-grafana-dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["vllm-specdec.json"]) == dashboard(settings)


# --- every kustomization of deploy/ -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kustomization", "version"),
    [(k, v) for k in KUSTOMIZATIONS for v in k.kubernetes_versions],
    ids=lambda x: x if isinstance(x, str) else x.path.name,
)
def test_builtin_kinds_pass_the_strict_kubernetes_schema(
    kustomization: Kustomization, version: str
) -> None:
    assert deploycheck.builtin_schema_problems(rendered(kustomization.path), version) == []


def test_the_native_sidecar_does_not_validate_on_kubernetes_1_27() -> None:
    """Negative control: strict schemas do reject fields a version does not know (1.28 has the
    field, behind a feature gate that is off by default)."""
    problems = deploycheck.builtin_schema_problems(rendered(EXAMPLE.path), "1.27")
    assert any("restartPolicy" in p for p in problems)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=lambda k: k.path.name)
def test_monitoring_resources_pass_the_prometheus_operator_schemas(
    kustomization: Kustomization,
) -> None:
    assert crd_problems(rendered(kustomization.path)) == []


def test_the_crd_check_catches_a_bad_duration_and_a_missing_field() -> None:
    manifests = rendered(MONITORING.path)
    find(manifests, "PodMonitor", "specdec-exporter")["spec"]["podMetricsEndpoints"][0][
        "interval"
    ] = "15 seconds"
    del find(manifests, "PrometheusRule", "specdec")["spec"]["groups"][0]["name"]

    problems = crd_problems(manifests)

    assert any("PodMonitor/specdec-exporter" in p and "interval" in p for p in problems)
    assert any("PrometheusRule/specdec" in p and "name" in p for p in problems)


@pytest.mark.parametrize("kustomization", [EXAMPLE, LEGACY_EXAMPLE], ids=lambda k: k.path.name)
def test_every_container_of_the_examples_meets_pod_security_restricted(
    kustomization: Kustomization,
) -> None:
    assert deploycheck.restricted_problems(rendered(kustomization.path)) == []


def test_the_restricted_check_catches_a_writable_root_and_kept_capabilities() -> None:
    manifests = rendered(EXAMPLE.path)
    _, container = sidecar_of(find(manifests, "Deployment", "vllm"))
    container["securityContext"]["readOnlyRootFilesystem"] = False
    container["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}

    problems = deploycheck.restricted_problems(manifests)

    assert problems == [
        f"Deployment/vllm container {SIDECAR}: does not drop ALL capabilities",
        f"Deployment/vllm container {SIDECAR}: root filesystem is writable",
    ]


# --- the example stack --------------------------------------------------------------------------


def test_the_example_is_its_workload_plus_the_components_plus_monitoring() -> None:
    kinds = sorted(m["kind"] for m in rendered(EXAMPLE.path))
    assert kinds == [
        "AlertmanagerConfig",
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "PodMonitor",
        "PodMonitor",
        "PrometheusRule",
        "Service",
    ]
    written = {
        key(m): m
        for m in yaml.safe_load_all((EXAMPLE.path / "deployment.yaml").read_text(encoding="utf-8"))
    }
    deployment = find(rendered(EXAMPLE.path), "Deployment", "vllm")
    original = written[key(deployment)]
    assert undo_injection(deployment, original, tap=True) == original


def test_the_example_sends_clients_through_the_tap_and_names_its_method() -> None:
    manifests = rendered(EXAMPLE.path)
    service = find(manifests, "Service", "vllm")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8000, "targetPort": tap_port(), "protocol": "TCP"}
    ]
    _, container = sidecar_of(find(manifests, "Deployment", "vllm"))
    method = next(e for e in container["env"] if e["name"] == "SPECDEC_SPECULATIVE_METHOD")
    assert method["valueFrom"] == {"configMapKeyRef": {"name": "vllm-speculative", "key": "method"}}
    config_map = find(manifests, "ConfigMap", "vllm-speculative")
    assert config_map == speculative_config_map(load().example_deployment)
    assert config_map["data"]["method"] == "ngram"
    assert json.loads(config_map["data"]["speculative-config"])["method"] == "ngram"
    assert deploy_problems(load(), manifests) == []


def test_the_legacy_example_runs_the_sidecar_as_a_plain_container() -> None:
    where, container = sidecar_of(find(rendered(LEGACY_EXAMPLE.path), "Deployment", "vllm"))
    _, native = sidecar_of(find(rendered(EXAMPLE.path), "Deployment", "vllm"))
    assert where == "containers"
    del native["restartPolicy"]
    assert container == native


def test_the_readmes_three_line_kustomization_injects_the_sidecar(tmp_path: Path) -> None:
    """README's "Running in Kubernetes" block, with the remote component read from this tree
    and the team's Deployment from a fixture."""
    readme = (COMPONENTS.parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Running in Kubernetes", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert len(block.splitlines()) == 3
    document = yaml.safe_load(block)
    (component,) = document["components"]
    local = COMPONENTS.parents[1] / component.split("//", 2)[2].split("?")[0]
    assert local == COMPONENTS / "sidecar"
    (tmp_path / "vllm.yaml").write_text(
        (FIXTURES / "codegen" / "workloads.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    document["components"] = [os.path.relpath(local, tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    where, _ = sidecar_of(find(rendered(tmp_path), "StatefulSet", "codegen"))
    assert where == "initContainers"


REF_PLACEHOLDER = "<commit>"
"""How the docs pin a remote path of this repository: the reader puts the commit they reviewed."""


def test_every_documented_ref_is_the_commit_placeholder_or_an_existing_tag() -> None:
    """A `?ref=` naming a tag that does not exist (`v0.1.0` was one) fails every reader's build."""
    root = COMPONENTS.parents[1]
    listed = subprocess.run(
        ["git", "tag", "--list"], cwd=root, capture_output=True, text=True, check=False
    )
    tags = set(listed.stdout.split()) if listed.returncode == 0 else set()  # no .git: no tags
    documents = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    refs = {
        (path.relative_to(root).as_posix(), ref)
        for path in documents
        for ref in re.findall(r"\?ref=([^\s`)\"']+)", path.read_text(encoding="utf-8"))
    }
    assert refs, "no ?ref= found: the pattern or the docs changed"
    assert {(where, ref) for where, ref in refs if ref not in tags | {REF_PLACEHOLDER}} == set()


# --- deploy/monitoring/links: the runbook and Grafana URLs from the user's overlay --------------

REMOTE = "https://github.com/vllm-specdec-exporter/vllm-specdec-exporter//"


def documented_links_overlay() -> dict[str, Any]:
    """docs/deploy.md's "Runbook and Grafana links" block, parsed."""
    text = (COMPONENTS.parents[1] / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = text.split("### Runbook and Grafana links", 1)[1]
    overlay: dict[str, Any] = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    return overlay


def local_copy(overlay: dict[str, Any], folder: Path) -> Path:
    """The overlay with this tree's paths for the remote ones, written into `folder`."""
    repository = COMPONENTS.parents[1]

    def local(url: str) -> str:
        assert url.startswith(REMOTE) and url.endswith(f"?ref={REF_PLACEHOLDER}"), url
        path = repository / url.removeprefix(REMOTE).split("?")[0]
        return os.path.relpath(path, folder)

    overlay = {
        **overlay,
        "resources": [local(u) for u in overlay["resources"]],
        "components": [local(u) for u in overlay["components"]],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay), encoding="utf-8")
    return folder


def test_the_documented_overlay_sets_both_urls_and_changes_nothing_else(tmp_path: Path) -> None:
    overlay = documented_links_overlay()
    literals = dict(item.split("=", 1) for item in overlay["configMapGenerator"][0]["literals"])
    runbook, grafana = literals["runbook"], literals["grafana"]
    links = load().links

    manifests = rendered(local_copy(overlay, tmp_path))

    assert "specdec-links" not in {m["metadata"]["name"] for m in manifests}, "local-config"
    rule = find(manifests, "PrometheusRule", "specdec")
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    for alert in alerts:
        annotations = alert["annotations"]
        assert annotations["runbook_url"] == f"{runbook}#{alert['alert'].lower()}"
        assert annotations["dashboard_url"].startswith(f"{grafana}/d/{links.dashboard_uid}/")
    board = json.loads(
        find(manifests, "ConfigMap", "specdec-grafana-dashboards")["data"]["vllm-specdec.json"]
    )
    assert [link["url"] for link in board["links"]] == [runbook]
    as_text = json.dumps(manifests)
    assert ".invalid" not in as_text
    restored = as_text.replace(runbook, links.runbook).replace(grafana, links.grafana)
    assert json.loads(restored) == rendered(MONITORING.path), "only the two URLs change"


def test_without_the_configmap_the_links_component_fails_the_build(tmp_path: Path) -> None:
    overlay = documented_links_overlay()
    del overlay["configMapGenerator"]
    with pytest.raises(ValueError, match=r"nothing selected by ConfigMap.*specdec-links"):
        deploycheck.render(local_copy(overlay, tmp_path))


def test_the_shipped_urls_are_reserved_names_that_never_resolve() -> None:
    links = load().links
    for url in (links.runbook, links.grafana):
        host = url.split("/")[2]
        assert host.endswith(".invalid"), url

"""deploy/components/probe: puts the engine probe into a foreign vLLM container and changes
nothing else. Rendered against the same foreign fixtures as the sidecar component
(test_deploy.py), with the team's own settings patch; undoing exactly what injection.yaml declares
must give the input back."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pod_faults
import pytest
import yaml
from required_tools import require
from specdec_artifacts import deploycheck
from specdec_artifacts.deploycheck import (
    COMPONENTS,
    LEGACY_VERSIONS,
    NATIVE_SIDECAR_VERSIONS,
    Manifest,
    find,
    pod_spec,
)
from test_deploy import (
    FIXTURES,
    INJECT_LABEL,
    SIDECAR,
    Case,
    key,
    opted_in,
    rendered,
    undo_injection,
    user_kustomization,
    write_kustomization,
)

from specdec_exporter.core.buckets import BATCH_BUCKETS_ENV, TEMPERATURE_BUCKETS_ENV
from specdec_exporter.core.probe_files import PROBE_DIR_ENV

REPO = COMPONENTS.parents[1]
PROBE = "specdec-probe"
PREPEND = "specdec-exporter.io/probe-pythonpath"


def injection() -> Manifest:
    """deploy/components/probe/injection.yaml: the local-config Pod holding every added piece."""
    pod: Manifest = yaml.safe_load((COMPONENTS / "probe" / "injection.yaml").read_text())
    return pod


def declared() -> tuple[Manifest, Manifest, Manifest, dict[str, Manifest]]:
    """(the volume, the init container, the vLLM container's mount, its env entries by name)."""
    spec = injection()["spec"]
    volume = {v["name"]: v for v in spec["volumes"]}[PROBE]
    (init,) = spec["initContainers"]
    vllm = spec["containers"][0]
    mount = {m["name"]: m for m in vllm["volumeMounts"]}[PROBE]
    return volume, init, mount, {e["name"]: e for e in vllm["env"]}


def declared_files() -> tuple[Manifest, Manifest, Manifest, Manifest]:
    """The probe's files: (the volume, vLLM's mount of it, the sidecar's, the sidecar's env)."""
    spec = injection()["spec"]
    volume = {v["name"]: v for v in spec["volumes"]}[FILES]
    vllm, sidecar = spec["containers"]
    assert sidecar["name"] == SIDECAR
    (sidecar_mount,) = sidecar["volumeMounts"]
    (sidecar_env,) = sidecar["env"]
    vllm_mount = {m["name"]: m for m in vllm["volumeMounts"]}[FILES]
    return volume, vllm_mount, sidecar_mount, sidecar_env


FILES = "specdec-probe-files"
ADDED_TO_VLLM = ("PYTHONPATH", TEMPERATURE_BUCKETS_ENV, BATCH_BUCKETS_ENV, PROBE_DIR_ENV)
ADDED_TO_SIDECAR = (TEMPERATURE_BUCKETS_ENV, BATCH_BUCKETS_ENV)


CASES = [
    Case("chat", ("sidecar", "probe"), 9000),
    Case("chat", ("sidecar", "tap", "probe", "legacy-sidecar"), 9000),
    Case("codegen", ("sidecar", "probe"), 8001),
    Case("codegen", ("sidecar", "tap", "probe"), 8001),
]


@pytest.fixture(scope="module")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Manifest]]:
    require("kubectl")
    root = tmp_path_factory.mktemp("probe-kustomizations")
    return {case.id: deploycheck.render(user_kustomization(case, root)) for case in CASES}


def take(items: list[Manifest], name: str) -> Manifest:
    """Remove and return the one item called `name`."""
    (found,) = [item for item in items if item["name"] == name]
    items.remove(found)
    return found


def containers_by_name(pod: Manifest) -> dict[str, Manifest]:
    return {c["name"]: c for where in ("initContainers", "containers") for c in pod.get(where, [])}


def undo_probe(rendered_workload: Manifest, original: Manifest) -> Manifest:
    """`rendered_workload` minus exactly what injection.yaml declares, asserting each piece."""
    result = copy.deepcopy(rendered_workload)
    pod = pod_spec(result)
    original_pod = pod_spec(original)
    if pod is None or original_pod is None or not opted_in(result):
        return result
    volume, init, mount, env = declared()
    files_volume, files_mount, sidecar_mount, sidecar_env = declared_files()
    assert take(pod["volumes"], PROBE) == volume
    assert take(pod["volumes"], FILES) == files_volume
    assert take(pod["initContainers"], PROBE) == init
    vllm = pod["containers"][0]
    original_vllm = original_pod["containers"][0]
    assert take(vllm["volumeMounts"], PROBE) == mount
    assert take(vllm["volumeMounts"], FILES) == files_mount
    for name in ADDED_TO_VLLM:
        assert take(vllm["env"], name) == env[name]
    sidecar = containers_by_name(pod)[SIDECAR]
    for name in ADDED_TO_SIDECAR:
        assert take(sidecar["env"], name) == env[name]
    assert take(sidecar["env"], PROBE_DIR_ENV) == sidecar_env
    assert take(sidecar["volumeMounts"], FILES) == sidecar_mount
    if not sidecar["volumeMounts"]:
        del sidecar["volumeMounts"]
    for field, holder, before in (
        ("volumes", pod, original_pod),
        ("volumeMounts", vllm, original_vllm),
        ("env", vllm, original_vllm),
    ):
        if not holder[field] and field not in before:
            del holder[field]
    return result


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_nothing_of_the_users_changes_but_the_injections(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    originals = {key(m): m for m in rendered(FIXTURES / case.fixture)}
    results = {key(m): m for m in renderings[case.id]}
    assert results.keys() == originals.keys()  # the local-config Pod is not rendered
    tap = "tap" in case.components
    for name, result in results.items():
        without_probe = undo_probe(result, originals[name])
        assert undo_injection(without_probe, originals[name], tap=tap) == originals[name], name


def test_the_comparison_sees_a_change_to_a_users_vllm_env(
    renderings: dict[str, list[Manifest]],
) -> None:
    """Negative control: the team's own env entry changed is not part of the injection."""
    result = copy.deepcopy(find(renderings["chat+sidecar+probe"], "Deployment", "chat-llm"))
    original = find(rendered(FIXTURES / "chat"), "Deployment", "chat-llm")
    pod = pod_spec(result)
    assert pod is not None
    pod["containers"][0]["env"][0]["value"] = "DEBUG"
    assert undo_injection(undo_probe(result, original), original, tap=False) != original


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
def test_the_copying_init_container_meets_pod_security_restricted(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    problems = deploycheck.restricted_problems(renderings[case.id])
    assert [p for p in problems if f"container {PROBE}:" in p] == []
    assert problems  # the teams' own containers are not restricted: the check did look


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_vllm_reads_the_copy_and_both_containers_read_one_source_of_edges(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    for workload in filter(opted_in, renderings[case.id]):
        pod = pod_spec(workload)
        if pod is None:
            continue
        vllm = pod["containers"][0]
        assert vllm["name"] in ("server", "vllm")  # the team's vLLM, not a sidecar
        copier = containers_by_name(pod)[PROBE]
        sidecar = containers_by_name(pod)[SIDECAR]
        (target,) = [m["mountPath"] for m in copier["volumeMounts"] if m["name"] == PROBE]
        (mount,) = [m for m in vllm["volumeMounts"] if m["name"] == PROBE]
        assert mount == {"name": PROBE, "mountPath": target, "readOnly": True}
        assert copier["command"][-1].rstrip("/") == target
        env = {e["name"]: e for e in vllm["env"]}
        assert env["PYTHONPATH"]["value"].split(":") == [target]
        sidecar_env = {e["name"]: e for e in sidecar["env"]}
        for name in ADDED_TO_SIDECAR:
            assert env[name]["valueFrom"] == sidecar_env[name]["valueFrom"]
            assert env[name]["valueFrom"]["configMapKeyRef"]["optional"] is True
        assert copier["image"] == sidecar["image"]
        # The probe writes its files where the sidecar reads them, and the sidecar only reads.
        (writes,) = [m for m in vllm["volumeMounts"] if m["name"] == FILES]
        (reads,) = [m for m in sidecar["volumeMounts"] if m["name"] == FILES]
        assert "readOnly" not in writes and reads["readOnly"] is True
        assert writes["mountPath"] == reads["mountPath"] == env[PROBE_DIR_ENV]["value"]
        assert sidecar_env[PROBE_DIR_ENV] == env[PROBE_DIR_ENV]
        (volume,) = [v for v in pod["volumes"] if v["name"] == FILES]
        assert volume["emptyDir"]["medium"] == "Memory"
        # The copier runs after the team's own init containers, and never as a sidecar.
        assert [c["name"] for c in pod["initContainers"]][-1] == PROBE
        assert "restartPolicy" not in copier


def test_the_copier_copies_what_the_image_writes_at_build_time() -> None:
    """The Dockerfile writes the probe where the init container copies it from."""
    _, init, _, _ = declared()
    source = init["command"][-2].removesuffix("/.")
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    written = rf"specdec-exporter install-probe (--quiet )?{re.escape(source)}\n"
    assert re.search(written, dockerfile)


# --- PYTHONPATH the team already sets -----------------------------------------------------------


def _codegen_with(tmp_path: Path, *, env: list[Manifest], annotate: bool) -> Path:
    """The codegen fixture with `env` on its vLLM container (and the prepend annotation)."""
    (workload, service) = list(
        yaml.safe_load_all((FIXTURES / "codegen" / "workloads.yaml").read_text(encoding="utf-8"))
    )
    workload["spec"]["template"]["spec"]["containers"][0]["env"] = env
    if annotate:
        workload["metadata"]["annotations"] = {PREPEND: "prepend"}
    base = tmp_path / "base"
    base.mkdir()
    (base / "workloads.yaml").write_text(yaml.safe_dump_all([workload, service]), encoding="utf-8")
    (base / "kustomization.yaml").write_text("resources: [workloads.yaml]\n", encoding="utf-8")
    return write_kustomization(
        tmp_path / "team",
        resources=[base],
        components=[COMPONENTS / "sidecar", COMPONENTS / "probe"],
    )


def _vllm_env(manifests: list[Manifest]) -> list[Any]:
    pod = pod_spec(find(manifests, "StatefulSet", "codegen"))
    assert pod is not None
    env: list[Any] = pod["containers"][0]["env"]
    return env


def test_a_pythonpath_already_set_stops_the_build_instead_of_being_replaced(
    tmp_path: Path,
) -> None:
    require("kubectl")
    folder = _codegen_with(
        tmp_path, env=[{"name": "PYTHONPATH", "value": "/opt/team"}], annotate=False
    )
    with pytest.raises(ValueError, match="PYTHONPATH_IS_SET"):
        deploycheck.render(folder)


def test_annotated_the_probe_goes_in_front_of_the_teams_pythonpath(tmp_path: Path) -> None:
    require("kubectl")
    team = [{"name": "A", "value": "a"}, {"name": "PYTHONPATH", "value": "/opt/team:/opt/more"}]
    manifests = deploycheck.render(_codegen_with(tmp_path, env=team, annotate=True))
    env = _vllm_env(manifests)
    assert env[:2] == [
        {"name": "A", "value": "a"},
        {"name": "PYTHONPATH", "value": "/specdec-probe:/opt/team:/opt/more"},
    ]
    assert [e["name"] for e in env[2:]] == [
        TEMPERATURE_BUCKETS_ENV,
        BATCH_BUCKETS_ENV,
        PROBE_DIR_ENV,
    ]


def test_annotated_without_a_pythonpath_stops_the_build(tmp_path: Path) -> None:
    require("kubectl")
    folder = _codegen_with(tmp_path, env=[{"name": "A", "value": "a"}], annotate=True)
    with pytest.raises(ValueError, match="PYTHONPATH"):
        deploycheck.render(folder)


def test_without_the_sidecar_component_the_build_stops(tmp_path: Path) -> None:
    """The probe's edges go to the sidecar too: alone, the component would invent a container."""
    require("kubectl")
    folder = write_kustomization(
        tmp_path, resources=[FIXTURES / "codegen"], components=[COMPONENTS / "probe"]
    )
    with pytest.raises(ValueError, match=r"initContainers.\[name=specdec-exporter\]"):
        deploycheck.render(folder)


def test_after_legacy_sidecar_the_build_stops(tmp_path: Path) -> None:
    require("kubectl")
    folder = write_kustomization(
        tmp_path,
        resources=[FIXTURES / "codegen"],
        components=[COMPONENTS / name for name in ("sidecar", "legacy-sidecar", "probe")],
    )
    with pytest.raises(ValueError, match=r"initContainers.\[name=specdec-exporter\]"):
        deploycheck.render(folder)


def test_legacy_clusters_get_the_copier_as_an_ordinary_init_container(
    renderings: dict[str, list[Manifest]],
) -> None:
    pod = pod_spec(
        find(renderings["chat+sidecar+tap+probe+legacy-sidecar"], "Deployment", "chat-llm")
    )
    assert pod is not None
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-weights", PROBE]
    assert [c["name"] for c in pod["containers"]] == ["server", "log-shipper", SIDECAR]
    assert LEGACY_VERSIONS and NATIVE_SIDECAR_VERSIONS  # both families validated above


def test_the_label_selects_the_workloads_only(renderings: dict[str, list[Manifest]]) -> None:
    """The labelled Service is not touched by the probe; the unlabelled Deployment neither."""
    manifests = renderings["chat+sidecar+probe"]
    frontend = pod_spec(find(manifests, "Deployment", "frontend"))
    assert frontend is not None and PROBE not in containers_by_name(frontend)
    service = find(manifests, "Service", "chat-llm")
    assert service["metadata"]["labels"][INJECT_LABEL] == "true"
    assert "template" not in service["spec"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_with_the_probe_no_sidecar_fault_reaches_vllms_pod_and_the_matrix_says_so(
    case: Case, renderings: dict[str, list[Manifest]]
) -> None:
    """The probe component adds an init container and variables, never a probe or a command
    that would let the sidecar hold vLLM's start or its pod's readiness (issue 26, section 6)."""
    rows = pod_faults.matrix_rows()
    workloads = [m for m in renderings[case.id] if pod_spec(m) is not None and opted_in(m)]
    assert workloads
    for workload in workloads:
        assert pod_faults.fault_problems(workload) == [], workload["metadata"]["name"]
        assert pod_faults.matrix_problems(workload, rows) == []

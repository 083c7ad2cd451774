"""The engine probe wherever vLLM runs: each snippet of docs/deploy.md and docs/integrations.md
for it, checked offline. The pieces (copier, volume, mount, PYTHONPATH, bucket edges) must equal
deploy/components/probe/injection.yaml's, the one place they are written for Kubernetes."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from required_tools import require
from specdec_artifacts import deploycheck
from specdec_artifacts.deploycheck import (
    COMPONENTS,
    DEPLOY,
    NATIVE_SIDECAR_VERSIONS,
    Manifest,
    ToolMissingError,
    find,
    pod_spec,
)
from test_deploy_probe import PROBE, declared, declared_files, injection
from test_integrations import FIXTURES, INTEGRATIONS, SIDECAR, documents, flag

from specdec_exporter.core import probe_names
from specdec_exporter.core.buckets import (
    BATCH_BUCKETS_ENV,
    DEFAULT_BATCH_EDGES,
    DEFAULT_EDGES,
    TEMPERATURE_BUCKETS_ENV,
    format_edge,
)
from specdec_exporter.core.probe_files import PROBE_DIR_ENV
from specdec_exporter.probe.install import ENTRY_POINT_NAME

DOCS = DEPLOY.parent / "docs"
FLAG = "--per-request-spec-decode-metrics"
BUCKET_ENV = (TEMPERATURE_BUCKETS_ENV, BATCH_BUCKETS_ENV)


def env_by_name(container: Manifest) -> dict[str, Manifest]:
    return {e["name"]: e for e in container.get("env", [])}


def yaml_block_after(text: str, heading: str) -> str:
    """The first ```yaml block after `heading` in a Markdown text."""
    return text.split(heading, 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]


# --- docs/deploy.md: the component as a team adds it --------------------------------------------


def test_the_docs_kustomization_injects_the_probe_and_adds_the_flag(tmp_path: Path) -> None:
    """deploy.md's block, remote components read from this tree, the team's StatefulSet from a
    fixture (its kind and name put in the patch's target)."""
    require("kubectl")
    docs = (DOCS / "deploy.md").read_text(encoding="utf-8")
    document = yaml.safe_load(
        yaml_block_after(docs, "## The engine probe: the temperature split from inside vLLM")
    )
    repo = COMPONENTS.parents[1]
    local = [repo / c.split("//", 2)[2].split("?")[0] for c in document["components"]]
    assert local == [COMPONENTS / "sidecar", COMPONENTS / "probe"]
    document["components"] = [os.path.relpath(path, tmp_path) for path in local]
    (patch,) = document["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "my-vllm"}
    patch["target"] = {"kind": "StatefulSet", "name": "codegen"}
    (tmp_path / "vllm.yaml").write_text(
        (FIXTURES / "codegen" / "workloads.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    pod = pod_spec(find(deploycheck.render(tmp_path), "StatefulSet", "codegen"))
    assert pod is not None
    vllm = pod["containers"][0]
    assert vllm["args"][-1] == f"{FLAG}=summary"
    assert env_by_name(vllm)["PYTHONPATH"]["value"] == "/specdec-probe"
    assert [c["name"] for c in pod["initContainers"]] == [SIDECAR, PROBE]


def test_the_docs_name_the_default_edges_and_the_configmap_keys() -> None:
    docs = (DOCS / "deploy.md").read_text(encoding="utf-8")
    temperature = ",".join(format_edge(e) for e in DEFAULT_EDGES)
    batch = ",".join(str(e) for e in DEFAULT_BATCH_EDGES)
    assert f"(`{temperature}` and `{batch}`," in docs
    _, _, _, env = declared()
    config_map = yaml.safe_load(yaml_block_after(docs, "To change them, create the ConfigMap"))
    refs = [env[name]["valueFrom"]["configMapKeyRef"] for name in BUCKET_ENV]
    assert {ref["name"] for ref in refs} == {config_map["metadata"]["name"]}
    assert [ref["key"] for ref in refs] == list(config_map["data"])


def test_the_docs_name_the_entry_point_for_vllm_plugins() -> None:
    docs = (DOCS / "deploy.md").read_text(encoding="utf-8")
    assert f"VLLM_PLUGINS=my_plugin,{ENTRY_POINT_NAME}" in docs


# --- docs/deploy.md: dropping the raw families where vLLM is scraped directly -------------------


def podmonitor_snippet() -> Manifest:
    docs = (DOCS / "deploy.md").read_text(encoding="utf-8")
    monitor: Manifest = yaml.safe_load(
        yaml_block_after(docs, "If you scrape vLLM's `/metrics` yourself")
    )
    return monitor


def _drops(rules: list[Manifest], name: str) -> bool:
    """Prometheus' metric relabelling of one sample name (fully anchored regex, drop action)."""
    for rule in rules:
        assert rule["sourceLabels"] == ["__name__"] and rule["action"] == "drop"
        if re.fullmatch(rule["regex"], name):
            return True
    return False


PROBE_FAMILIES = [
    value
    for key, value in vars(probe_names).items()
    if key.isupper()
    and isinstance(value, str)
    and value.startswith(probe_names.PREFIX)
    and value != probe_names.PREFIX
]
SUFFIXES = ("", "_total", "_created", "_bucket", "_sum", "_count")


def test_the_relabelling_drops_every_probe_sample_and_nothing_of_vllms() -> None:
    (endpoint,) = podmonitor_snippet()["spec"]["podMetricsEndpoints"]
    rules = endpoint["metricRelabelings"]
    assert len(PROBE_FAMILIES) >= 15
    for family in PROBE_FAMILIES:
        for suffix in SUFFIXES:
            assert _drops(rules, family + suffix), family + suffix
    kept = [
        "vllm:spec_decode_num_drafts_total",
        "vllm:num_requests_running",
        "vllm:e2e_request_latency_seconds_bucket",
        "specdec_acceptance_rate",
        "specdec_probe",
        "process_cpu_seconds_total",
    ]
    assert [name for name in kept if _drops(rules, name)] == []


def test_the_podmonitor_snippet_passes_the_prometheus_operator_schema() -> None:
    try:
        problems = deploycheck.crd_schema_problems([podmonitor_snippet()])
    except ToolMissingError as exc:
        from required_tools import missing  # noqa: PLC0415

        missing(str(exc))
        raise
    assert problems == []


def test_the_relabelling_as_a_scrape_config_passes_promtool(tmp_path: Path) -> None:
    """The same rule in Prometheus' own configuration: RE2 compiles the regex."""
    promtool = require("promtool")
    (endpoint,) = podmonitor_snippet()["spec"]["podMetricsEndpoints"]
    config = {
        "scrape_configs": [
            {
                "job_name": "vllm",
                "static_configs": [{"targets": ["vllm:8000"]}],
                "metric_relabel_configs": [
                    {"source_labels": r["sourceLabels"], "regex": r["regex"], "action": r["action"]}
                    for r in endpoint["metricRelabelings"]
                ],
            }
        ]
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- Helm: the post-renderer with the probe component -------------------------------------------


@pytest.fixture(scope="module")
def post_rendered_probe() -> list[Manifest]:
    require("kubectl")
    chart_output = (FIXTURES / "production-stack" / "rendered.yaml").read_text(encoding="utf-8")
    result = subprocess.run(
        [str(INTEGRATIONS / "helm" / "post-renderer.sh"), "probe"],
        input=chart_output,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return deploycheck.load_manifests(result.stdout)


def test_the_post_renderer_puts_the_probe_into_the_charts_vllm_container(
    post_rendered_probe: list[Manifest],
) -> None:
    pod = pod_spec(find(post_rendered_probe, "Deployment", "vllm-llama-deployment-vllm"))
    assert pod is not None
    vllm = pod["containers"][0]
    assert vllm["name"] == "vllm"
    _, init, mount, env = declared()
    assert [c["name"] for c in pod["initContainers"]] == [SIDECAR, PROBE]
    assert pod["initContainers"][1] == init
    assert mount in vllm["volumeMounts"]
    for name in ("PYTHONPATH", *BUCKET_ENV):
        assert env_by_name(vllm)[name] == env[name]


@pytest.mark.parametrize("version", NATIVE_SIDECAR_VERSIONS)
def test_the_post_rendered_chart_with_the_probe_passes_the_strict_schema(
    post_rendered_probe: list[Manifest], version: str
) -> None:
    assert deploycheck.builtin_schema_problems(post_rendered_probe, version) == []


# --- production-stack: the probe through the chart's values -------------------------------------

VLLM_STACK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "servingEngineSpec": {
            "type": "object",
            "properties": {
                "modelSpec": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "labels": {"type": "object"},
                            "env": {"type": "array"},
                            "extraVolumes": {"type": "array"},
                            "extraVolumeMounts": {"type": "array"},
                            "initContainer": {
                                "type": "object",
                                "properties": {
                                    "name": {"type": "string"},
                                    "image": {"type": "string"},
                                    "command": {"type": "array", "items": {"type": "string"}},
                                    "args": {"type": "array", "items": {"type": "string"}},
                                    "env": {"type": "array"},
                                    "resources": {"type": "object"},
                                    "extraVolumeMounts": {"type": "array"},
                                    "mountPvcStorage": {"type": "boolean"},
                                },
                                "additionalProperties": False,
                            },
                            "vllmConfig": {
                                "type": "object",
                                "properties": {
                                    "extraArgs": {"type": "array", "items": {"type": "string"}}
                                },
                            },
                        },
                    },
                }
            },
        }
    },
}
"""The keys values-probe.yaml relies on, with their types, as vllm-stack 0.1.12's
values.schema.json declares them (vllm-project/production-stack helm/, commit a6c01db); the
chart's templates render `initContainer` (only these fields: no securityContext), `extraVolumes`
into the pod, and `env` / `extraVolumeMounts` into the "vllm" container. `initContainer` is closed
here so that a field the chart would silently drop fails the test."""


def values_probe_model() -> Manifest:
    (values,) = documents(INTEGRATIONS / "production-stack" / "values-probe.yaml")
    jsonschema.validate(values, VLLM_STACK_SCHEMA)
    (model,) = values["servingEngineSpec"]["modelSpec"]
    result: Manifest = model
    return result


def test_the_values_carry_the_probes_pieces_and_the_flag() -> None:
    model = values_probe_model()
    volume, init, mount, env = declared()
    assert model["extraVolumes"] == [volume]
    assert model["extraVolumeMounts"] == [mount]
    assert model["env"] == [env[name] for name in ("PYTHONPATH", *BUCKET_ENV)]
    chart_init = model["initContainer"]
    expected = {k: v for k, v in init.items() if k not in ("volumeMounts", "securityContext")}
    assert {k: v for k, v in chart_init.items() if k != "extraVolumeMounts"} == expected
    assert chart_init["extraVolumeMounts"] == init["volumeMounts"]
    assert flag(model["vllmConfig"]["extraArgs"], FLAG) == "summary"
    assert model["labels"] == {"specdec-exporter.io/inject": "true"}


def test_the_values_schema_check_catches_a_field_the_chart_drops() -> None:
    """Negative control: a securityContext on the chart's initContainer is not rendered."""
    values = {"servingEngineSpec": {"modelSpec": [{"initContainer": {"securityContext": {}}}]}}
    with pytest.raises(jsonschema.ValidationError, match="securityContext"):
        jsonschema.validate(values, VLLM_STACK_SCHEMA)


# --- KServe -------------------------------------------------------------------------------------


def kserve_pod() -> tuple[Manifest, Manifest, Manifest]:
    """(the pod KServe builds: runtime containers and volumes + the predictor's init containers,
    the runtime, the InferenceService)."""
    runtime, service = documents(INTEGRATIONS / "kserve" / "servingruntime.yaml")
    spec = runtime["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llama-predictor", "labels": spec["labels"]},
        "spec": {
            "initContainers": service["spec"]["predictor"]["initContainers"],
            "containers": spec["containers"],
            "volumes": spec["volumes"],
        },
    }
    return pod, runtime, service


def test_kserve_carries_the_probes_pieces_and_the_flag() -> None:
    pod, _, _ = kserve_pod()
    volume, init, mount, env = declared()
    files, vllm_files, sidecar_files, sidecar_env = declared_files()
    vllm, sidecar = pod["spec"]["containers"]
    assert vllm["name"] == "kserve-container"
    assert pod["spec"]["volumes"] == [volume, files]
    assert pod["spec"]["initContainers"] == [init]
    assert vllm["volumeMounts"] == [mount, vllm_files]
    assert env_by_name(vllm) == {
        name: env[name] for name in ("PYTHONPATH", *BUCKET_ENV, PROBE_DIR_ENV)
    }
    assert sidecar["volumeMounts"] == [sidecar_files]  # read-only, the path vLLM writes to
    assert env_by_name(sidecar)[PROBE_DIR_ENV] == sidecar_env
    for name in BUCKET_ENV:
        assert env_by_name(sidecar)[name] == env[name]
    assert flag(vllm["args"], FLAG) == "summary"


@pytest.mark.parametrize("version", NATIVE_SIDECAR_VERSIONS)
def test_the_kserve_pod_with_the_probe_passes_the_strict_schema(version: str) -> None:
    pod, _, _ = kserve_pod()
    assert deploycheck.builtin_schema_problems([pod], version) == []


def test_the_kserve_copier_meets_pod_security_restricted() -> None:
    pod, _, _ = kserve_pod()
    workload = {"kind": "Deployment", "metadata": {"name": "kserve"}, "spec": {"template": pod}}
    problems = deploycheck.restricted_problems([workload])
    assert [p for p in problems if PROBE in p or SIDECAR in p] == []


# --- docker run ---------------------------------------------------------------------------------


def docker_commands(text: str) -> list[list[str]]:
    joined = text.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.startswith("docker run")]


def option_values(words: list[str], option: str) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words) if word == option]


def test_docker_writes_the_probe_and_vllm_loads_it_from_there() -> None:
    script = (INTEGRATIONS / "docker" / "run-probe.sh").read_text(encoding="utf-8")
    install, vllm, sidecar = docker_commands(script)
    image = injection()["spec"]["initContainers"][0]["image"]
    assert install[install.index(image) + 1 :] == ["install-probe", "/specdec-probe"]
    (host_target,) = option_values(install, "-v")
    host, target = host_target.split(":")
    assert target == "/specdec-probe"
    assert f"{host}:{target}:ro" in option_values(vllm, "-v")
    env = option_values(vllm, "-e")
    assert f"PYTHONPATH={target}" in env
    assert flag(vllm, FLAG) == "summary"
    for name in BUCKET_ENV:  # passed through from the host to both, or to neither
        assert name in env and name in option_values(sidecar, "-e")
    # The probe's files: one volume, written by vLLM, read by the sidecar, at the directory both
    # are told (SPECDEC_PROBE_DIR), as deploy/components/probe sets them.
    (writes,) = option_values(vllm, "--mount")
    (reads,) = option_values(sidecar, "--mount")
    assert reads == writes + ",readonly"
    target = dict(part.split("=") for part in writes.split(","))["target"]
    assert f"{PROBE_DIR_ENV}={target}" in env
    assert f"{PROBE_DIR_ENV}={target}" in option_values(sidecar, "-e")
    assert "--proxy-listen" not in sidecar  # no tap: every request reaches vLLM directly
    assert flag(sidecar, "--network") == "container:vllm"
    assert flag(sidecar, "--vllm-url") == f"http://127.0.0.1:{flag(vllm, '--port')}"


def test_docs_show_the_tested_docker_probe_commands() -> None:
    docs = (DOCS / "integrations.md").read_text(encoding="utf-8")
    block = docs.split("### With the engine probe", 1)[1].split("```sh\n", 1)[1].split("```")[0]
    script = (INTEGRATIONS / "docker" / "run-probe.sh").read_text(encoding="utf-8")
    assert docker_commands(block) == docker_commands(script)
    assert len(docker_commands(script)) == 3

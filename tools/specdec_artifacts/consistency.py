"""Drift checks between the example deployment in deploy/ and alerts/config.toml.

vLLM's --speculative-config and the sidecar's --speculative-method must name the same method (the
config's), the never-up page must wait longer than vLLM's startupProbe allows, and the PodMonitor
must give the jobs the selectors select.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from specdec_artifacts.deploycheck import render
from specdec_artifacts.kube import SPECULATIVE_CONFIG_MAP
from specdec_artifacts.rules import startup_grace_seconds
from specdec_artifacts.settings import REPO_ROOT, Settings

Manifest = dict[str, Any]
Container = dict[str, Any]

EXAMPLE = REPO_ROOT / "deploy" / "examples" / "llama-ngram"
VLLM_CONTAINER = "vllm"
SIDECAR_CONTAINER = "specdec-exporter"
_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
PROBE_DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "failureThreshold": 3}
"""Kubernetes' defaults for a probe's timing fields."""


def example_manifests(folder: Path = EXAMPLE) -> list[Manifest]:
    """The example stack as kustomize renders it (the sidecar injected by the components), without
    its generated speculative-config ConfigMap: callers add the one the config gives."""
    return [
        doc
        for doc in render(folder)
        if (doc["kind"], doc["metadata"]["name"]) != ("ConfigMap", SPECULATIVE_CONFIG_MAP)
    ]


def deploy_problems(settings: Settings, manifests: list[Manifest]) -> list[str]:
    """What in the manifests (the hand-written ones plus the generated ConfigMap) disagrees
    with the config."""
    config_maps = {
        m["metadata"]["name"]: m.get("data", {}) for m in manifests if m["kind"] == "ConfigMap"
    }
    problems = []
    for deployment in (m for m in manifests if m["kind"] in ("Deployment", "StatefulSet")):
        containers = _containers(deployment)
        vllm, sidecar = containers.get(VLLM_CONTAINER), containers.get(SIDECAR_CONTAINER)
        if vllm is None or sidecar is None:
            problems.append(
                f"{_name(deployment)}: no `{VLLM_CONTAINER}` and "
                f"`{SIDECAR_CONTAINER}` containers to compare"
            )
            continue
        problems += [
            f"{_name(deployment)}: {p}"
            for p in method_problems(settings, vllm, sidecar, config_maps)
        ]
        problems += [f"{_name(deployment)}: {p}" for p in startup_problems(settings, vllm)]
    problems += job_problems(settings, [m for m in manifests if m["kind"] == "PodMonitor"])
    return problems


def method_problems(
    settings: Settings, vllm: Container, sidecar: Container, config_maps: dict[str, dict[str, str]]
) -> list[str]:
    wanted = settings.example_deployment
    text = _resolve(_flag(vllm, "--speculative-config"), vllm, config_maps)
    if text is None:
        return ["vLLM has no --speculative-config"]
    try:
        speculative = json.loads(text)
    except ValueError:
        return [f"vLLM's --speculative-config is not JSON: {text!r}"]
    method = _resolve(_flag(sidecar, "--speculative-method"), sidecar, config_maps)
    if method is None:
        method = _env(sidecar, "SPECDEC_SPECULATIVE_METHOD", config_maps)
    problems = []
    if speculative != wanted.speculative_config:
        problems.append(
            f"vLLM's --speculative-config {speculative} is not alerts/config.toml's "
            f"{wanted.speculative_config}"
        )
    if method != speculative.get("method"):
        problems.append(
            f"the sidecar's --speculative-method {method!r} is not vLLM's method "
            f"{speculative.get('method')!r}: it would model the wrong draft cost"
        )
    return problems


def startup_problems(settings: Settings, vllm: Container) -> list[str]:
    probe = vllm.get("startupProbe")
    if probe is None:
        return []
    timing = {**PROBE_DEFAULTS, **probe}
    budget = timing["initialDelaySeconds"] + timing["periodSeconds"] * timing["failureThreshold"]
    grace = startup_grace_seconds(settings)
    if budget >= grace:
        return [
            f"vLLM's startupProbe allows {budget:g} s, but SpecDecodeVLLMNeverUp pages after "
            f"{grace:g} s: a slow start would page; raise its `for`"
        ]
    return []


def job_problems(settings: Settings, monitors: Iterable[Manifest]) -> list[str]:
    jobs = {
        rule["replacement"]
        for monitor in monitors
        for endpoint in monitor["spec"]["podMetricsEndpoints"]
        for rule in endpoint.get("relabelings", [])
        if rule.get("targetLabel") == "job" and "replacement" in rule
    }
    problems = []
    for name, job in (
        ("sidecar_job", settings.selectors.sidecar_job),
        ("vllm_job", settings.selectors.vllm_job),
    ):
        if job is not None and job not in jobs:
            problems.append(
                f"[selectors] {name} selects job {job!r}, but the "
                f"PodMonitor sets the jobs {sorted(jobs)}"
            )
    return problems


def _containers(workload: Manifest) -> dict[str, Container]:
    pod = workload["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod.get("containers", [])]}


def _arguments(container: Container) -> Iterator[str]:
    yield from container.get("command", [])
    yield from container.get("args", [])


def _flag(container: Container, flag: str) -> str | None:
    """The value of `--flag VALUE` or `--flag=VALUE` on the container's command line."""
    arguments = list(_arguments(container))
    for index, argument in enumerate(arguments):
        if argument == flag and index + 1 < len(arguments):
            return str(arguments[index + 1])
        if argument.startswith(flag + "="):
            return str(argument.split("=", 1)[1])
    return None


def _resolve(
    value: str | None, container: Container, config_maps: dict[str, dict[str, str]]
) -> str | None:
    """Kubernetes' `$(VAR)` expansion of a command-line value from the container's env."""
    if value is None:
        return None
    return _VARIABLE.sub(lambda m: _env(container, m.group(1), config_maps) or m.group(0), value)


def _env(container: Container, name: str, config_maps: dict[str, dict[str, str]]) -> str | None:
    for variable in container.get("env", []):
        if variable["name"] != name:
            continue
        if "value" in variable:
            return str(variable["value"])
        ref = variable.get("valueFrom", {}).get("configMapKeyRef")
        if ref is not None:
            return config_maps.get(ref["name"], {}).get(ref["key"])
    return None


def _name(manifest: Manifest) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"

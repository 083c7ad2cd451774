"""Offline checks of deploy/'s rendered kustomizations: Kubernetes and CRD schemas, policy.

Built-in kinds are validated with kubernetes-validate's strict schemas (unknown fields fail);
monitoring.coreos.com kinds with tools/crd-validate (node, prometheus-operator's schemas).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specdec_artifacts.settings import REPO_ROOT

Manifest = dict[str, Any]

DEPLOY = REPO_ROOT / "deploy"
CRD_VALIDATOR = REPO_ROOT / "tools" / "crd-validate"
MONITORING_GROUP = "monitoring.coreos.com/"


NATIVE_SIDECAR_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33", "1.37")
"""Native sidecars (`restartPolicy` on init containers) are on by default from Kubernetes 1.29;
1.37 is the newest schema kubernetes-validate ships."""
LEGACY_VERSIONS = ("1.25", "1.26", "1.27", "1.28")
"""Clusters without native sidecars: the legacy-sidecar component's targets."""


@dataclass(frozen=True)
class Kustomization:
    path: Path
    kubernetes_versions: tuple[str, ...]
    """Versions whose schemas the rendered manifests must pass."""


COMPONENTS = DEPLOY / "components"
MONITORING = Kustomization(DEPLOY / "monitoring", LEGACY_VERSIONS + NATIVE_SIDECAR_VERSIONS)
EXAMPLE = Kustomization(DEPLOY / "examples" / "llama-ngram", NATIVE_SIDECAR_VERSIONS)
LEGACY_EXAMPLE = Kustomization(DEPLOY / "examples" / "llama-ngram-legacy", LEGACY_VERSIONS)
KUSTOMIZATIONS = (MONITORING, EXAMPLE, LEGACY_EXAMPLE)
"""Every kustomization under deploy/ that renders on its own (components render inside one)."""


class ToolMissingError(RuntimeError):
    """A command-line tool (kubectl, node) or the crd-validate modules are not installed."""


def render(kustomization: Path) -> list[Manifest]:
    """`kubectl kustomize` of one directory, parsed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise ToolMissingError("kubectl is not on PATH")
    result = subprocess.run(
        [kubectl, "kustomize", str(kustomization)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        raise ValueError(f"kubectl kustomize {kustomization} failed: {result.stderr.strip()}")
    return load_manifests(result.stdout)


def load_manifests(text: str) -> list[Manifest]:
    return [doc for doc in yaml.load_all(text, Loader=_KubernetesLoader) if doc]


def builtin_schema_problems(manifests: list[Manifest], version: str) -> list[str]:
    """Every non-CRD manifest against the strict Kubernetes schema of `version`."""
    import kubernetes_validate  # type: ignore[import-untyped]  # noqa: PLC0415  (22 MB: lazy)

    problems = []
    for manifest in manifests:
        if manifest["apiVersion"].startswith(MONITORING_GROUP):
            continue
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(str(p) for p in exc.path)
            problems.append(f"{_name(manifest)} (Kubernetes {version}) at {path}: {exc.message}")
    return problems


def crd_schema_problems(manifests: list[Manifest]) -> list[str]:
    """Every monitoring.coreos.com manifest against prometheus-operator's schemas (node)."""
    node = shutil.which("node")
    if node is None:
        raise ToolMissingError("node is not on PATH")
    if not (CRD_VALIDATOR / "node_modules").is_dir():
        folder = CRD_VALIDATOR.relative_to(REPO_ROOT)
        raise ToolMissingError(f"run `npm ci --prefix {folder}` first")
    resources = [m for m in manifests if m["apiVersion"].startswith(MONITORING_GROUP)]
    result = subprocess.run(
        [node, str(CRD_VALIDATOR / "validate.mjs")],
        input=json.dumps(resources),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode not in (0, 1):
        raise RuntimeError(f"crd-validate crashed: {result.stderr.strip()}")
    return result.stdout.splitlines()[:-1] if result.returncode else []


def restricted_problems(manifests: list[Manifest]) -> list[str]:
    """The Pod Security "restricted" profile, plus a read-only root filesystem everywhere."""
    problems = []
    for manifest in manifests:
        pod = pod_spec(manifest)
        if pod is None:
            continue
        pod_context = pod.get("securityContext", {})
        for container in containers(pod):
            context = {**pod_context, **container.get("securityContext", {})}
            problems += [
                f"{_name(manifest)} container {container['name']}: {p}"
                for p in _restricted_container(context)
            ]
        problems += [
            f"{_name(manifest)}: volume {v['name']} is hostPath"
            for v in pod.get("volumes", [])
            if "hostPath" in v
        ]
    return problems


def pod_spec(manifest: Manifest) -> dict[str, Any] | None:
    if manifest["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
        return spec
    return None


def containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod.get("initContainers", [])
    yield from pod.get("containers", [])


def find(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    for manifest in manifests:
        if manifest["kind"] == kind and manifest["metadata"]["name"] == name:
            return manifest
    raise KeyError(f"{kind}/{name} not rendered")


def _restricted_container(context: dict[str, Any]) -> list[str]:
    problems = []
    if context.get("runAsNonRoot") is not True:
        problems.append("runAsNonRoot is not true")
    if context.get("runAsUser") == 0:
        problems.append("runs as uid 0")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    if context.get("privileged"):
        problems.append("is privileged")
    if context.get("capabilities", {}).get("drop") != ["ALL"]:
        problems.append("does not drop ALL capabilities")
    if set(context.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
        problems.append("adds capabilities")
    if context.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
        problems.append("seccompProfile is not RuntimeDefault")
    if context.get("readOnlyRootFilesystem") is not True:
        problems.append("root filesystem is writable")
    return problems


def _name(manifest: Manifest) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


class _KubernetesLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's `=` (value) tag: kubectl writes `matchType: =` bare."""


_KubernetesLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

"""Issue 26, section 6, on rendered manifests: what in a workload would let a fault of the
sidecar reach vLLM's pod, and whether docs/deploy.md's failure matrix says what the manifests do.

The Kubernetes rules this rests on (kubelet, 1.29+): a native sidecar counts in the pod's
ContainersReady whether or not it has a readiness probe, and is not ready while it is not running;
the containers after a native sidecar start once it has *started* (running, and its startup probe
passed if it has one); a liveness probe's failure restarts the container; a plain init container
holds everything after it until it exits 0. docs/deploy.md cites them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from specdec_artifacts.deploycheck import Manifest, pod_spec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
SIDECAR = "specdec-exporter"
KEEPER = ["python", "-m", "specdec_exporter.sidecar.keeper", SIDECAR, "run"]
TAP_READINESS = {"httpGet": {"path": "/readyz", "port": "specdec-metrics"}}
MATRIX = "## When the sidecar fails: vLLM's pod and its traffic"
FAULTS = ("crash", "hang", "OOM", "config error", "never ready")
"""The faults of the matrix, by the first words of its rows."""
WHOLE_CONTAINER = ("crash", "hang", "OOM", "config error")
"""Faults that take the tap down with the sidecar process: with the tap the pod is NotReady."""


def sidecar_of(workload: Manifest) -> tuple[str, dict[str, Any]]:
    pod = pod_spec(workload)
    assert pod is not None
    (found,) = [
        (where, container)
        for where in ("initContainers", "containers")
        for container in pod.get(where, [])
        if container["name"] == SIDECAR
    ]
    return found


def variant(sidecar: dict[str, Any]) -> str:
    names = {variable["name"] for variable in sidecar.get("env", [])}
    return "tap" if "SPECDEC_PROXY_LISTEN" in names else "probe-only"


def fault_problems(workload: Manifest) -> list[str]:
    """Each way a sidecar fault could end its container, hold vLLM's start or make the pod
    NotReady in this rendered workload (beyond what the tap's readiness must do)."""
    where, sidecar = sidecar_of(workload)
    problems = []
    if sidecar.get("command", []) + sidecar.get("args", []) != KEEPER:
        problems.append("its process is not the keeper: an exit (crash, bad setting) ends it")
    if "startupProbe" in sidecar:
        problems.append("a startup probe holds vLLM's start until it passes")
    if "livenessProbe" in sidecar:
        problems.append("a liveness probe restarts the container on a hang: the pod NotReady")
    readiness = {key: sidecar[key] for key in ("readinessProbe",) if key in sidecar}
    if variant(sidecar) == "probe-only" and readiness:
        problems.append("a readiness probe without the tap: the sidecar's health is the pod's")
    if variant(sidecar) == "tap":
        probe = readiness.get("readinessProbe", {})
        if {key: probe.get(key) for key in TAP_READINESS} != TAP_READINESS:
            problems.append(f"with the tap, readiness is not the tap's /readyz: {probe}")
    if where == "initContainers" and sidecar.get("restartPolicy") != "Always":
        problems.append("a plain init container: vLLM waits for it to exit")
    if "memory" not in sidecar.get("resources", {}).get("limits", {}):
        problems.append("no memory limit: the keeper has no ceiling, the node's OOM the last word")
    return problems


def matrix_rows(text: str | None = None) -> dict[tuple[str, str], dict[str, str]]:
    """(fault, variant) -> {column: cell} of docs/deploy.md's failure matrix."""
    text = DOCS.read_text(encoding="utf-8") if text is None else text
    section = text[text.index(MATRIX) :]
    section = section[: section.index("\n## ", 1)]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in lines[1:]:
        cells = dict(
            zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)
        )
        fault = next((f for f in FAULTS if cells["fault"].startswith(f)), cells["fault"])
        rows[(fault, cells["variant"])] = cells
    return rows


def matrix_problems(workload: Manifest, rows: dict[tuple[str, str], dict[str, str]]) -> list[str]:
    """Where the matrix's row for this workload's variant says other than its manifest does."""
    _, sidecar = sidecar_of(workload)
    kind = variant(sidecar)
    problems = []
    for fault in FAULTS:
        row = rows.get((fault, kind))
        if row is None:
            problems.append(f"no row for {fault} / {kind}")
            continue
        if not row["vLLM's start"].startswith("not delayed"):
            problems.append(f"{fault} / {kind}: the matrix says vLLM's start waits")
        ready = kind == "probe-only" or fault not in WHOLE_CONTAINER
        said = row["vLLM's pod"]
        if ready != bool(re.match(r"stays Ready\b", said)):
            problems.append(f"{fault} / {kind}: the matrix says {said!r}")
    return problems

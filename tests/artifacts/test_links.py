"""deploy/monitoring/links: one ConfigMap in the user's overlay sets every runbook and Grafana link
of the stack (the alerts', the dashboards' and the injected sidecars' SPECDEC_RUNBOOK_URL and
SPECDEC_GRAFANA_DASHBOARD_URL), rendered with `kubectl kustomize`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from required_tools import require
from specdec_artifacts import deploycheck
from specdec_artifacts.links import GRAFANA_ENV, RUNBOOK_ENV
from specdec_artifacts.settings import REPO_ROOT, load

RUNBOOK = "https://wiki.example.org/runbooks/vllm-specdec.md"
GRAFANA = "https://grafana.example.org"
EXAMPLE = REPO_ROOT / "deploy" / "examples" / "llama-ngram"
LINKS = REPO_ROOT / "deploy" / "monitoring" / "links"
LEGACY = REPO_ROOT / "deploy" / "components" / "legacy-sidecar"
Manifest = dict[str, Any]


def overlay(folder: Path, resources: list[Path], components: list[Path]) -> Path:
    """The user's overlay: the stack, the links Component, and the one setting."""
    folder.mkdir(parents=True, exist_ok=True)
    document = {
        "resources": [os.path.relpath(p, folder) for p in resources],
        "components": [os.path.relpath(p, folder) for p in components],
        "configMapGenerator": [
            {
                "name": "specdec-links",
                "literals": [f"runbook={RUNBOOK}", f"grafana={GRAFANA}"],
                "options": {
                    "disableNameSuffixHash": True,
                    "annotations": {"config.kubernetes.io/local-config": "true"},
                },
            }
        ],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    return folder


def render(folder: Path) -> list[Manifest]:
    require("kubectl")
    return deploycheck.render(folder)


def sidecar_env(manifests: list[Manifest]) -> dict[str, str]:
    (workload,) = [m for m in manifests if m["kind"] == "Deployment"]
    pod = workload["spec"]["template"]["spec"]
    (sidecar,) = [
        c
        for where in ("initContainers", "containers")
        for c in pod.get(where) or []
        if c["name"] == "specdec-exporter"
    ]
    return {e["name"]: e.get("value", "") for e in sidecar["env"]}


def test_one_setting_sets_every_link_of_the_example_stack(tmp_path: Path) -> None:
    """The example (workload, sidecar, tap, monitoring, Alertmanager routing) with the links
    Component and its ConfigMap: no `.invalid` host is left anywhere."""
    manifests = render(overlay(tmp_path, [EXAMPLE], [LINKS]))
    text = json.dumps(manifests)
    assert ".invalid" not in text
    env = sidecar_env(manifests)
    links = load().links
    assert env[RUNBOOK_ENV] == RUNBOOK
    assert env[GRAFANA_ENV] == f"{GRAFANA}/d/{links.dashboard_uid}/{links.dashboard_slug}"
    rule = next(m for m in manifests if m["kind"] == "PrometheusRule")
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert {a["annotations"]["runbook_url"].split("#")[0] for a in alerts} == {RUNBOOK}
    assert {a["annotations"]["dashboard_url"].split("/d/")[0] for a in alerts} == {GRAFANA}


def test_without_the_component_the_example_links_nowhere_real(tmp_path: Path) -> None:
    """The same test fails without the Component (it is the Component that does it); the sidecar
    then links its own /runbook (no variable set)."""
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [os.path.relpath(EXAMPLE, folder)]}), encoding="utf-8"
    )
    manifests = render(folder)
    assert ".invalid" in json.dumps(manifests)
    assert RUNBOOK_ENV not in sidecar_env(manifests)


def test_listed_before_the_legacy_component_the_moved_sidecar_keeps_its_links(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    manifests = render(overlay(base, [EXAMPLE], [LINKS, LEGACY]))
    assert ".invalid" not in json.dumps(manifests)
    (workload,) = [m for m in manifests if m["kind"] == "Deployment"]
    names = [c["name"] for c in workload["spec"]["template"]["spec"]["containers"]]
    assert names[-1] == "specdec-exporter"
    assert sidecar_env(manifests)[RUNBOOK_ENV] == RUNBOOK


def test_listed_after_the_legacy_component_the_build_fails_rather_than_add_a_container(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="test operation does not apply"):
        render(overlay(tmp_path, [EXAMPLE], [LEGACY, LINKS]))

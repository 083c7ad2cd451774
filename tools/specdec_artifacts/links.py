"""The kustomize Component deploy/monitoring/links: sets the runbook and Grafana base URLs of the
generated rules and dashboards, and the injected sidecars' links, from one ConfigMap of the
user's overlay, without regenerating.

Kustomize replacements rewrite one part of a field split at a delimiter: the part before `#` of
every runbook_url, the part before `/d/` of every dashboard_url, and, in the dashboards
ConfigMap, the runbook link: the one part of the JSON text between two `"` that is the runbook
URL. The generator computes that part's index and checks every split here. In every workload
that carries the injection label, the Component first adds SPECDEC_RUNBOOK_URL and
SPECDEC_GRAFANA_DASHBOARD_URL to the sidecar (a patch, as deploy/components/tap does), then sets
them: the whole runbook URL, and Grafana's base before the dashboard's `/d/<uid>/<slug>`.
"""

from __future__ import annotations

from typing import Any

import yaml

from specdec_artifacts.kube import Manifest
from specdec_artifacts.rules import DASHBOARD_PATH, RUNBOOK_ANCHOR
from specdec_artifacts.settings import Links
from specdec_exporter.sidecar.config import Settings as SidecarSettings

CONFIG_MAP = "specdec-links"
"""The ConfigMap the user's overlay generates (local-config: kustomize does not output it)."""
RUNBOOK_KEY = "runbook"
GRAFANA_KEY = "grafana"
QUOTE = '"'
INJECT_LABEL = "specdec-exporter.io/inject=true"
"""The label selecting the workloads deploy/components/sidecar injects into."""
WORKLOADS = "Deployment|StatefulSet"
SIDECAR_CONTAINER = "specdec-exporter"
_ENV_PREFIX = SidecarSettings.model_config["env_prefix"]
RUNBOOK_ENV = f"{_ENV_PREFIX}RUNBOOK_URL"
GRAFANA_ENV = f"{_ENV_PREFIX}GRAFANA_DASHBOARD_URL"
assert {"runbook_url", "grafana_dashboard_url"} <= set(SidecarSettings.model_fields)


class LinkSplitError(ValueError):
    """A URL of [links] would not split where the replacements cut (settings.Links refuses the
    delimiters, so this is a generator bug)."""


def links_component(
    links: Links,
    rule: Manifest,
    dashboards: Manifest,
) -> Manifest:
    """The Component's kustomization: replacements from CONFIG_MAP into `rule` (the
    PrometheusRule) and `dashboards` (the dashboards ConfigMap)."""
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    _check_splits(alerts, links)
    rule_target = {"kind": rule["kind"], "name": rule["metadata"]["name"]}
    board_target = {"kind": dashboards["kind"], "name": dashboards["metadata"]["name"]}
    board_targets = [
        {
            "select": dict(board_target),
            "fieldPaths": [f"data.{_escaped(key)}"],
            "options": {"delimiter": QUOTE, "index": _quoted_part(text, links.runbook)},
        }
        for key, text in sorted(dashboards["data"].items())
    ]
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "patches": [_sidecar_env_patch(links)],
        "replacements": [
            {
                "source": _source(RUNBOOK_KEY),
                "targets": [
                    _rule_target(rule_target, "runbook_url", RUNBOOK_ANCHOR),
                    *board_targets,
                    *_sidecar_target(RUNBOOK_ENV, None),
                ],
            },
            {
                "source": _source(GRAFANA_KEY),
                "targets": [
                    _rule_target(rule_target, "dashboard_url", DASHBOARD_PATH),
                    *_sidecar_target(GRAFANA_ENV, DASHBOARD_PATH),
                ],
            },
        ],
    }


def dashboard_url(links: Links) -> str:
    """The dashboard's URL as the sidecar links it (`--grafana-dashboard-url`)."""
    return f"{links.grafana}{DASHBOARD_PATH}{links.dashboard_uid}/{links.dashboard_slug}"


def _workloads() -> dict[str, str]:
    return {"group": "apps", "kind": WORKLOADS, "labelSelector": INJECT_LABEL}


def _sidecar_env_patch(links: Links) -> dict[str, Any]:
    """Adds both variables to the injected sidecar, with the shipped values the replacements
    then overwrite (kustomize replaces only a field that exists). The `test` fails the build
    where the sidecar is not the first init container, as after ../../components/legacy-sidecar
    (list this Component before it) rather than add a container with no image."""
    sidecar = "/spec/template/spec/initContainers/0"
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"{sidecar}/name", "value": SIDECAR_CONTAINER},
        {
            "op": "add",
            "path": f"{sidecar}/env/-",
            "value": {"name": RUNBOOK_ENV, "value": links.runbook},
        },
        {
            "op": "add",
            "path": f"{sidecar}/env/-",
            "value": {"name": GRAFANA_ENV, "value": dashboard_url(links)},
        },
    ]
    return {"target": _workloads(), "patch": yaml.safe_dump(ops, sort_keys=False)}


def _sidecar_target(variable: str, delimiter: str | None) -> list[dict[str, Any]]:
    """One target per workload kind: a replacement's `select` takes no regex (a patch's does)."""
    options = {} if delimiter is None else {"options": {"delimiter": delimiter, "index": 0}}
    return [
        {
            "select": {"group": "apps", "kind": kind, "labelSelector": INJECT_LABEL},
            "fieldPaths": [
                f"spec.template.spec.initContainers.[name={SIDECAR_CONTAINER}]"
                f".env.[name={variable}].value"
            ],
            **options,
        }
        for kind in WORKLOADS.split("|")
    ]


def _escaped(key: str) -> str:
    """A ConfigMap key as one element of a kustomize field path (`a.json` -> `a\\.json`)."""
    return key.replace(".", "\\.")


def _source(key: str) -> dict[str, str]:
    return {"kind": "ConfigMap", "name": CONFIG_MAP, "fieldPath": f"data.{key}"}


def _rule_target(select: dict[str, str], annotation: str, delimiter: str) -> dict[str, Any]:
    return {
        "select": dict(select),
        "fieldPaths": [f"spec.groups.*.rules.*.annotations.{annotation}"],
        "options": {"delimiter": delimiter, "index": 0},
    }


def _check_splits(alerts: list[dict[str, Any]], links: Links) -> None:
    for alert in alerts:
        annotations = alert["annotations"]
        if annotations["runbook_url"].split(RUNBOOK_ANCHOR)[0] != links.runbook:
            raise LinkSplitError(f"[links] runbook must not contain {RUNBOOK_ANCHOR!r}")
        if annotations["dashboard_url"].split(DASHBOARD_PATH)[0] != links.grafana:
            raise LinkSplitError(f"[links] grafana must not contain {DASHBOARD_PATH!r}")


def _quoted_part(text: str, url: str) -> int:
    """The index of `url` among the parts of `text` split at `"`: it must be exactly one."""
    found = [index for index, part in enumerate(text.split(QUOTE)) if part == url]
    if len(found) != 1:
        raise LinkSplitError(
            f"the dashboard JSON holds the runbook URL as a whole string {len(found)} times, "
            "not once; [links] runbook must not contain '\"'"
        )
    return found[0]

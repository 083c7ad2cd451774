"""The kustomize Component deploy/monitoring/links: sets the runbook and Grafana base URLs of the
generated rules and dashboards from a ConfigMap of the user's overlay, without regenerating.

Kustomize replacements rewrite one part of a field split at a delimiter: the part before `#` of
every runbook_url, the part before `/d/` of every dashboard_url, and, in the dashboards
ConfigMap, the runbook link: the one part of the JSON text between two `"` that is the runbook
URL. The generator computes that part's index and checks every split here.
"""

from __future__ import annotations

from typing import Any

from specdec_artifacts.kube import Manifest
from specdec_artifacts.rules import DASHBOARD_PATH, RUNBOOK_ANCHOR
from specdec_artifacts.settings import Links

CONFIG_MAP = "specdec-links"
"""The ConfigMap the user's overlay generates (local-config: kustomize does not output it)."""
RUNBOOK_KEY = "runbook"
GRAFANA_KEY = "grafana"
QUOTE = '"'


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
        "replacements": [
            {
                "source": _source(RUNBOOK_KEY),
                "targets": [
                    _rule_target(rule_target, "runbook_url", RUNBOOK_ANCHOR),
                    *board_targets,
                ],
            },
            {
                "source": _source(GRAFANA_KEY),
                "targets": [_rule_target(rule_target, "dashboard_url", DASHBOARD_PATH)],
            },
        ],
    }


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

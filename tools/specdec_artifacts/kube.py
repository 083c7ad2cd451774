"""Kubernetes wrappers of generated artifacts: the PrometheusRule, the dashboards ConfigMap and
the example deployment's speculative-decoding ConfigMap."""

from __future__ import annotations

import json
from typing import Any

from specdec_artifacts.rules import RuleGroup
from specdec_artifacts.settings import ExampleDeployment

Manifest = dict[str, Any]

RELEASE_LABEL = {"release": "kube-prometheus-stack"}
"""kube-prometheus-stack's Prometheus selects PodMonitors and PrometheusRules by the label
`release: <helm release name>`; patch it in an overlay if your release is named otherwise."""

APP_LABEL = {"app.kubernetes.io/part-of": "vllm-specdec-exporter"}
SPECULATIVE_CONFIG_MAP = "vllm-speculative"
METHOD_KEY = "method"
"""The sidecar's SPECDEC_SPECULATIVE_METHOD comes from this key."""
SPECULATIVE_CONFIG_KEY = "speculative-config"
"""vLLM's --speculative-config comes from this key."""
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
"""The label Grafana's dashboard sidecar (kube-prometheus-stack default) watches for."""


def prometheus_rule(groups: list[RuleGroup]) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "specdec", "labels": {**APP_LABEL, **RELEASE_LABEL}},
        "spec": {"groups": groups},
    }


def dashboards_config_map(dashboards: dict[str, dict[str, Any]]) -> Manifest:
    """One ConfigMap holding every dashboard JSON, keyed by file name."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "specdec-grafana-dashboards",
            "labels": {**APP_LABEL, **DASHBOARD_LABEL},
            "annotations": {"grafana_folder": "vLLM"},
        },
        "data": {name: dashboard_json(board) for name, board in sorted(dashboards.items())},
    }


def dashboard_json(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def speculative_config_map(example: ExampleDeployment) -> Manifest:
    """One source for vLLM's --speculative-config and the sidecar's --speculative-method."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SPECULATIVE_CONFIG_MAP, "labels": dict(APP_LABEL)},
        "data": {
            METHOD_KEY: example.method,
            SPECULATIVE_CONFIG_KEY: json.dumps(example.speculative_config),
        },
    }

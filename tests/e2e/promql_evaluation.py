"""Evaluate every dashboard query and rule expression against a live Prometheus.

Grafana variables are replaced by match-all values (`$__rate_interval` by a given window) so the
exact text of each panel query reaches Prometheus' parser and engine; any error is reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from specdec_artifacts.contract import AWAITED_SPECDEC_METRICS

_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.DOTALL)


@dataclass
class Evaluation:
    errors: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    with_data: list[str] = field(default_factory=list)


def to_promql(expr: str, rate_interval: str) -> str:
    """A Grafana query as Prometheus sees it with every variable set to All."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in ("__rate_interval", "__interval", "__range"):
            return rate_interval
        return ".*"

    return _VARIABLE.sub(value, expr)


def variable_query(definition: str) -> str:
    """`label_values(selector, label)` as the PromQL that answers it."""
    match = _LABEL_VALUES.match(definition.strip())
    if match is None:
        raise ValueError(f"unsupported variable query {definition!r}")
    return f"count by ({match.group(2)}) ({match.group(1)})"


def dashboard_expressions(board: dict[str, Any]) -> list[str]:
    exprs = [target["expr"] for panel in _panels(board) for target in panel.get("targets", [])]
    exprs += [
        variable_query(v["definition"]) for v in board["templating"]["list"] if v["type"] == "query"
    ]
    exprs += [note["expr"] for note in board["annotations"]["list"] if "expr" in note]
    return exprs


def awaited(expr: str) -> bool:
    """The query reads a family of the probe contract the sidecar does not export yet."""
    return any(metric.name in expr for metric in AWAITED_SPECDEC_METRICS)


def rule_expressions(groups: list[dict[str, Any]]) -> list[str]:
    return [rule["expr"] for group in groups for rule in group["rules"]]


def evaluate(prometheus_url: str, exprs: Iterable[str], rate_interval: str) -> Evaluation:
    report = Evaluation()
    with httpx.Client(base_url=prometheus_url, timeout=10.0) as client:
        for expr in exprs:
            promql = to_promql(expr, rate_interval)
            reply = client.get("/api/v1/query", params={"query": promql})
            body = reply.json()
            if reply.status_code != 200 or body.get("status") != "success":
                report.errors.append(f"{body.get('error', reply.status_code)}: {promql}")
            elif body["data"]["result"]:
                report.with_data.append(expr)
            else:
                report.empty.append(expr)
    return report


def _panels(board: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])

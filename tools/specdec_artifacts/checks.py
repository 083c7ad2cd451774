"""Checks of generated artifacts: stale committed files, PromQL that leaves the contract, and
dashboard queries that are not scoped to the selected cluster and namespace."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from specdec_artifacts.contract import (
    CHECKED_SPECDEC_METRICS,
    PROBE_FED,
    VLLM_METRICS,
    series_index,
)
from specdec_artifacts.grafana import DATASOURCE, NO_DATA, NO_TRAFFIC
from specdec_artifacts.outputs import Output

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME = re.compile(r"(?<![\w:$])[a-zA-Z_][\w:]*")
_SELECTOR = re.compile(r"(?<![\w:])([a-zA-Z_][\w:]*)\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
_MODIFIER = re.compile(
    r"\s*(?:(?:on|ignoring)\s*\([\w\s,]*\)\s*)?"
    r"(?:group_(?:left|right)\s*(?:\([\w\s,]*\))?\s*)?"
)
_SPECDEC = series_index(CHECKED_SPECDEC_METRICS)
_VLLM = series_index(VLLM_METRICS)
REQUIRED_VARIABLES = (
    "datasource",
    "cluster",
    "sidecar_job",
    "namespace",
    "pod",
    "model",
    "engine",
    "bucket",
    "vllm_job",
)
_SERIES_USE = re.compile(r"(?<![\w:$])([a-zA-Z_][\w:]*)\s*(\{[^}]*\})?")
_JOB_MATCHER = re.compile(r'(?<![\w])job\s*(?:=~|!~|!=|=)\s*"([^"]*)"')
HEALTH_SERIES = ("up", "specdec_up", "specdec_temperature_split_info", "specdec_engine_probe_info")
"""What the first row's health stat reads: the sidecar's target, vLLM from the sidecar, the split's
source and the engine probe's state."""
_TAP = re.compile(r"\btap\b", re.IGNORECASE)


def stale_outputs(outputs: Iterable[Output], root: Path) -> list[str]:
    """One readable message per generated file that differs from (or is missing in) `root`."""
    problems = []
    for output in outputs:
        path = root / output.path
        if not path.exists():
            problems.append(f"{output.path}: missing (never generated)")
            continue
        committed = path.read_text(encoding="utf-8")
        if committed != output.text:
            problems.append(f"{output.path}: stale\n{_short_diff(committed, output.text)}")
    return problems


def query_problems(
    expr: str, recorded: frozenset[str], extra_labels: tuple[str, ...] = ()
) -> list[str]:
    """What is wrong with one PromQL expression: unknown series or labels, unguarded maths.
    `extra_labels`: labels every series may carry besides its own (the cluster label)."""
    text = _QUOTED.sub('""', expr)
    problems = [*_unknown_series(text, recorded), *_unknown_labels(expr, extra_labels)]
    problems += _unguarded_divisions(text) + _unguarded_quantiles(text)
    return problems


def dashboard_problems(
    board: dict[str, Any], recorded: frozenset[str], scope_labels: tuple[str, ...] = ("namespace",)
) -> list[str]:
    """Structure (datasource variable, uid, tags, "No traffic") and every query of a dashboard;
    every specdec_*, vllm:* or recorded series must be filtered on each of `scope_labels`."""
    problems = []
    if "__inputs" in board:
        problems.append("dashboard has __inputs: use the ${datasource} variable instead")
    if not board.get("uid"):
        problems.append("dashboard has no stable uid")
    if "vllm" not in board.get("tags", []):
        problems.append("dashboard is not tagged vllm")
    names = [v["name"] for v in board["templating"]["list"]]
    problems += [f"missing variable ${name}" for name in REQUIRED_VARIABLES if name not in names]
    problems += first_row_problems(board) + tap_title_problems(board)
    problems += [
        f"variable ${v['name']}: {p}"
        for v in board["templating"]["list"]
        for p in hard_coded_jobs(v.get("definition", ""))
    ]
    for note in board["annotations"]["list"]:
        problems += [
            f"annotation {note['name']!r}: {p}"
            for p in _annotation_problems(note, recorded, scope_labels)
        ]
    for panel in panels_of(board):
        problems += [
            f"panel {panel['title']!r}: {p}" for p in _panel_problems(panel, recorded, scope_labels)
        ]
        problems += [
            f"panel {panel['title']!r}: {p}"
            for target in panel["targets"]
            for p in [
                *unscoped_series(target["expr"], scope_labels),
                *hard_coded_jobs(target["expr"]),
            ]
        ]
    return problems


def hard_coded_jobs(expr: str) -> list[str]:
    """Each `job` matcher on a literal: a job is a dashboard variable (`$sidecar_job`,
    `$vllm_job`), so one dashboard serves whatever job a Prometheus gives the targets."""
    return [
        f'job is hard-coded as "{value}": use a job variable'
        for value in _JOB_MATCHER.findall(expr)
        if not value.startswith("$")
    ]


def rows_of(board: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(row title, its panels) in order; panels before any row under the title ""."""
    rows: list[tuple[str, list[dict[str, Any]]]] = [("", [])]
    for panel in board["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], list(panel.get("panels", []))))
        else:
            rows[-1][1].append(panel)
    return [row for row in rows if row[0] or row[1]]


def first_row_problems(board: dict[str, Any]) -> list[str]:
    """The first row must hold a health stat reading the sidecar's target, vLLM from the
    sidecar, the split's source and the probe, whose "no data" differs from "No traffic"."""
    rows = rows_of(board)
    if not rows:
        return ["the dashboard has no rows"]
    title, panels = rows[0]
    for panel in panels:
        exprs = " ".join(t["expr"] for t in panel["targets"])
        used = {name for name, _ in _SERIES_USE.findall(_QUOTED.sub('""', exprs))}
        if panel["type"] == "stat" and set(HEALTH_SERIES) <= used:
            no_value = panel["fieldConfig"]["defaults"].get("noValue", "")
            if NO_TRAFFIC in no_value:
                return [f"the health stat of row {title!r} says {NO_TRAFFIC!r} without data"]
            return []
    return [f"the first row {title!r} holds no health stat reading {', '.join(HEALTH_SERIES)}"]


def tap_title_problems(board: dict[str, Any]) -> list[str]:
    """A row, panel or legend that names the tap alone for a family the engine probe feeds too."""
    problems = []
    for row_title, panels in rows_of(board):
        for panel in panels:
            for target in panel["targets"]:
                names = {n for n, _ in _SERIES_USE.findall(_QUOTED.sub('""', target["expr"]))}
                fed = sorted(names & PROBE_FED)
                if not fed:
                    continue
                for what, text in (
                    ("row", row_title),
                    ("panel", panel["title"]),
                    ("legend", target.get("legendFormat", "")),
                ):
                    if _TAP.search(text) and "probe" not in text.lower():
                        problems.append(
                            f"{what} {text!r} says tap for {fed[0]}, which the engine probe feeds"
                        )
    return sorted(set(problems))


def unscoped_series(expr: str, labels: tuple[str, ...]) -> list[str]:
    """Each use of a specdec_*, vllm:* or recorded series that lacks a matcher on one of
    `labels` (so it would mix namespaces or clusters)."""
    problems = []
    for name, matchers in _SERIES_USE.findall(_QUOTED.sub('""', expr)):
        if not (name.startswith(("specdec_", "vllm:")) or ":specdec_" in name):
            continue
        present = set(_MATCHER_LABEL.findall(matchers))
        problems += [
            f"{name} is not filtered on {label}" for label in labels if label not in present
        ]
    return problems


def rule_problems(groups: list[dict[str, Any]], extra_labels: tuple[str, ...] = ()) -> list[str]:
    """Every rule expression against the contract, with the same guards as the dashboards."""
    recorded = frozenset(r["record"] for g in groups for r in g["rules"] if "record" in r)
    return [
        f"rule {rule.get('record') or rule.get('alert')}: {problem}"
        for group in groups
        for rule in group["rules"]
        for problem in query_problems(rule["expr"], recorded, extra_labels)
    ]


def panels_of(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        if panel["type"] != "row":
            yield panel
        yield from panel.get("panels", [])


def _panel_problems(
    panel: dict[str, Any], recorded: frozenset[str], extra_labels: tuple[str, ...]
) -> list[str]:
    defaults = panel["fieldConfig"]["defaults"]
    problems = []
    if panel.get("datasource") != DATASOURCE:
        problems.append("datasource is not ${datasource}")
    if not str(defaults.get("noValue", "")).startswith(NO_DATA) or not any(
        m.get("options", {}).get("result", {}).get("text") == NO_TRAFFIC
        for m in defaults.get("mappings", [])
    ):
        problems.append(f'no "{NO_DATA}" value and "{NO_TRAFFIC}" mapping')
    for target in panel["targets"]:
        problems += [
            f"{p} in {target['expr']!r}"
            for p in query_problems(target["expr"], recorded, extra_labels)
        ]
    return problems


def _annotation_problems(
    note: dict[str, Any], recorded: frozenset[str], scope_labels: tuple[str, ...]
) -> list[str]:
    """A query annotation: the ${datasource}, a valid query, scoped like the panels (ALERTS
    carries the alert's namespace and cluster)."""
    problems = [] if note.get("datasource") == DATASOURCE else ["datasource is not ${datasource}"]
    expr = note["expr"]
    problems += query_problems(expr, recorded, scope_labels)
    matchers = "".join(m for name, m in _SELECTOR.findall(expr) if name == "ALERTS")
    present = set(_MATCHER_LABEL.findall(_QUOTED.sub('""', matchers)))
    return problems + [
        f"ALERTS is not filtered on {label}" for label in scope_labels if label not in present
    ]


def _unknown_series(text: str, recorded: frozenset[str]) -> list[str]:
    problems = []
    for name in _NAME.findall(text):
        if ":specdec_" in name and name not in recorded:
            problems.append(f"recording rule {name} is not generated")
        elif name.startswith("specdec_") and name not in _SPECDEC:
            problems.append(f"{name} is not in the exported-metrics contract")
        elif name.startswith("vllm:") and name not in _VLLM:
            problems.append(f"{name} is not a vLLM series the contract lists")
    return problems


def _unknown_labels(expr: str, extra_labels: tuple[str, ...]) -> list[str]:
    problems = []
    for name, matchers in _SELECTOR.findall(expr):
        metric = _SPECDEC.get(name) or _VLLM.get(name)
        if metric is None:
            continue
        for label in _MATCHER_LABEL.findall(_QUOTED.sub('""', matchers)):
            if label not in metric.allowed_labels() | set(extra_labels):
                problems.append(f"{name} has no label {label}")
    return problems


def _unguarded_divisions(text: str) -> list[str]:
    """Every `/` must divide by a parenthesised `(... > 0)`."""
    problems = []
    for match in re.finditer(r"/", text):
        rest = text[match.end() :]
        modifier = _MODIFIER.match(rest)
        operand = _parenthesised(rest[modifier.end() if modifier else 0 :])
        if operand is None or not re.search(r">\s*0\s*$", operand):
            problems.append("division without a `(denominator > 0)` guard")
    return problems


def _unguarded_quantiles(text: str) -> list[str]:
    """Every histogram_quantile must be followed by `and <observations> > 0`."""
    problems = []
    for match in re.finditer(r"histogram_quantile\s*", text):
        call = _parenthesised(text[match.end() :])
        after = text[match.end() + len(call or "") + 2 :]
        if call is None or not re.match(r"\s*and\b[^/]*>\s*0", after):
            problems.append("histogram_quantile without an `and <count> > 0` guard")
    return problems


def _parenthesised(text: str) -> str | None:
    """The inside of the parenthesis `text` starts with, or None if it starts with none."""
    if not text.startswith("("):
        return None
    depth = 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return text[1:index]
    return None


def _short_diff(committed: str, generated: str, limit: int = 30) -> str:
    lines = list(
        difflib.unified_diff(
            committed.splitlines(),
            generated.splitlines(),
            "committed",
            "generated",
            lineterm="",
            n=1,
        )
    )
    shown = lines[:limit] + (
        [f"... {len(lines) - limit} more diff lines"] if len(lines) > limit else []
    )
    return "\n".join("    " + line for line in shown)

"""Plain-dict builders for Grafana dashboard JSON (schemaVersion 39): panels, variables, layout."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

JSON = dict[str, Any]

SCHEMA_VERSION = 39
"""Grafana 10.3+/11.x; newer Grafana migrates it on load, older ones ignore unknown options."""

DATASOURCE: JSON = {"type": "prometheus", "uid": "${datasource}"}
NO_TRAFFIC = "No traffic"
"""What a panel shows where the series exist but nothing was counted (a query's NaN)."""
NO_DATA = "No data"
"""What a panel shows where no series came back at all: the sidecar (or vLLM's job) not scraped,
or the family not exported. Never the same words as NO_TRAFFIC: down is not idle."""
NO_TRAFFIC_MAPPING: JSON = {
    "type": "special",
    "options": {"match": "null+nan", "result": {"text": NO_TRAFFIC, "index": 0}},
}
GRID_WIDTH = 24

PanelKind = Literal["timeseries", "stat", "heatmap", "table"]


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    heatmap: bool = False
    instant: bool = False
    """One value per series now (tables), instead of a range."""


@dataclass(frozen=True)
class Threshold:
    """A red-below/green-above boundary drawn as a line (timeseries) or used as colour (stat);
    with `band`, yellow from `value` up to `band`, green above (a borderline band)."""

    value: float
    good_above: bool = True
    band: float | None = None


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    kind: PanelKind = "timeseries"
    unit: str = "none"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    threshold: Threshold | None = None
    dashed: str | None = None
    """Regex on series names drawn dashed: reference lines such as the break-even rate."""
    stacked: bool = False
    mappings: tuple[JSON, ...] = ()
    """Value mappings after "No traffic" (a stat that shows a number as a word)."""
    no_value: str = NO_DATA
    """What the panel says when no series came back (a health stat says what is not scraped)."""


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def constant_variable(name: str, value: str) -> JSON:
    """A hidden variable with a fixed value (a variable queries may name but nobody picks)."""
    return {
        "name": name,
        "type": "constant",
        "query": value,
        "hide": 2,
        "current": {"text": value, "value": value},
        "options": [],
    }


def query_variable(
    name: str, label: str, query: str, all_value: str | None = ".*", current: str | None = None
) -> JSON:
    """A multi-select variable with an All option: `all_value`, or (None) every listed value.
    `current`: the value selected when the dashboard opens (if Grafana lists it), else All."""
    variable: JSON = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable", "qryType": 1},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "sort": 1,
        "current": {} if current is None else {"text": [current], "value": [current]},
        "options": [],
        "hide": 0,
        "regex": "",
    }
    if all_value is not None:
        variable["allValue"] = all_value
    return variable


def value_mapping(texts: dict[int, tuple[str, str]]) -> JSON:
    """Numbers shown as words: {value: (text, colour)}."""
    return {
        "type": "value",
        "options": {
            str(value): {"text": text, "color": color, "index": index + 1}
            for index, (value, (text, color)) in enumerate(sorted(texts.items()))
        },
    }


def annotation(name: str, expr: str, *, color: str, title: str, text: str, tags: str) -> JSON:
    """A Prometheus annotation: one mark per series of `expr` while it has a value."""
    return {
        "name": name,
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": color,
        "expr": expr,
        "step": "60s",
        "titleFormat": title,
        "textFormat": text,
        "tagKeys": tags,
        "useValueForTime": False,
    }


def datasource_variable() -> JSON:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "options": [],
        "hide": 0,
        "refresh": 1,
        "regex": "",
    }


def layout(rows: tuple[Row, ...]) -> list[JSON]:
    """Row headers and panels with ids and grid positions, left to right, top to bottom."""
    panels: list[JSON] = []
    y = 0
    for row in rows:
        panels.append(
            {
                "type": "row",
                "title": row.title,
                "id": len(panels) + 1,
                "collapsed": False,
                "panels": [],
                "gridPos": _grid(0, y, GRID_WIDTH, 1),
            }
        )
        y, x, line_height = y + 1, 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                y, x, line_height = y + line_height, 0, 0
            panels.append(
                render_panel(panel, len(panels) + 1, _grid(x, y, panel.width, panel.height))
            )
            x, line_height = x + panel.width, max(line_height, panel.height)
        y += line_height
    return panels


def render_panel(panel: Panel, panel_id: int, grid: JSON) -> JSON:
    rendered: JSON = {
        "type": panel.kind,
        "id": panel_id,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "targets": [
            _target(q, chr(ord("A") + i), now=panel.kind == "stat")
            for i, q in enumerate(panel.queries)
        ],
        "fieldConfig": {"defaults": _field_defaults(panel), "overrides": _overrides(panel)},
        "options": _options(panel),
    }
    if panel.kind == "table":  # one row per series: its labels and its value, no timestamp
        rendered["transformations"] = [
            {"id": "organize", "options": {"excludeByName": {"Time": True}}}
        ]
    return rendered


def _target(query: Query, ref_id: str, *, now: bool = False) -> JSON:
    """`now`: one value per series at the dashboard's end (a stat): a series that stopped
    has no value now, so a stat never shows a figure from before traffic stopped."""
    target: JSON = {
        "datasource": DATASOURCE,
        "refId": ref_id,
        "expr": query.expr,
        "legendFormat": query.legend or "__auto",
        "range": not now,
        "instant": now,
        "editorMode": "code",
    }
    if query.heatmap:
        target["format"] = "heatmap"
        target["legendFormat"] = "{{le}}"
    if query.instant:
        target.update(format="table", range=False, instant=True)
    return target


def _field_defaults(panel: Panel) -> JSON:
    defaults: JSON = {
        "unit": panel.unit,
        "noValue": panel.no_value,
        "mappings": [NO_TRAFFIC_MAPPING, *panel.mappings],
        "color": {"mode": "palette-classic"},
        "thresholds": _thresholds(panel),
    }
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.kind == "timeseries":
        defaults["custom"] = _timeseries_style(panel)
    if panel.kind in ("stat", "table"):
        defaults["color"] = {"mode": "thresholds"}
    if panel.kind == "table":
        defaults["custom"] = {"align": "auto", "cellOptions": {"type": "color-text"}}
    return defaults


def _thresholds(panel: Panel) -> JSON:
    if panel.threshold is None:
        return {"mode": "absolute", "steps": [{"color": "green", "value": None}]}
    below, above = ("red", "green") if panel.threshold.good_above else ("green", "red")
    steps: list[JSON] = [
        {"color": below, "value": None},
        {"color": above, "value": panel.threshold.value},
    ]
    if panel.threshold.band is not None:
        steps[1]["color"] = "yellow"
        steps.append({"color": above, "value": panel.threshold.band})
    return {"mode": "absolute", "steps": steps}


def _timeseries_style(panel: Panel) -> JSON:
    return {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 25 if panel.stacked else 10,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
        "thresholdsStyle": {"mode": "line" if panel.threshold else "off"},
    }


def _overrides(panel: Panel) -> list[JSON]:
    if panel.dashed is None:
        return []
    return [
        {
            "matcher": {"id": "byRegexp", "options": panel.dashed},
            "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
        }
    ]


def _options(panel: Panel) -> JSON:
    if panel.kind == "stat":
        return {
            "reduceOptions": {"calcs": ["last"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
            "textMode": "value_and_name",
            "orientation": "auto",
            "justifyMode": "auto",
        }
    if panel.kind == "table":
        return {
            "showHeader": True,
            "cellHeight": "sm",
            "sortBy": [{"displayName": "Value", "desc": False}],
        }
    if panel.kind == "heatmap":
        return {
            "calculate": False,
            "cellGap": 1,
            "yAxis": {"axisPlacement": "left", "unit": panel.unit},
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
            "tooltip": {"mode": "single", "yHistogram": True},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
        }
    return {
        "legend": {
            "displayMode": "table",
            "placement": "bottom",
            "showLegend": True,
            "calcs": ["mean", "lastNotNull"],
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


def _grid(x: int, y: int, width: int, height: int) -> JSON:
    return {"x": x, "y": y, "w": width, "h": height}

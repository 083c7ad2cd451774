"""Inline SVG line charts of acceptance over time, one per model, drawn by the server."""

from __future__ import annotations

import html
from collections.abc import Sequence

from specdec_exporter.sidecar.history import Series
from specdec_exporter.term import format_cell

MODEL_COLOUR = "#000000"
BUCKET_COLOURS = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#8c6d31",
    "#7f7f7f",
)
"""Okabe-Ito's colour-blind-safe palette (and two more), one colour per temperature bucket."""

WIDTH, HEIGHT = 440, 170
LEFT, RIGHT, TOP, BOTTOM = 34, 12, 10, 24
Y_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


def bucket_colours(series: Sequence[Series]) -> dict[str, str]:
    """A colour per bucket label, by order of first appearance, so every chart uses the same."""
    labels = dict.fromkeys(s.temperature_bucket for s in series if s.temperature_bucket)
    return {
        label: BUCKET_COLOURS[index % len(BUCKET_COLOURS)] for index, label in enumerate(labels)
    }


def charts(series: Sequence[Series], span: float) -> str:
    """One figure per model over the last ``span`` seconds: its own acceptance (thick, on top)
    and its buckets' (thin), with a legend."""
    colours = bucket_colours(series)
    models = dict.fromkeys(s.model_name for s in series)
    figures = []
    for model in sorted(models):
        lines = sorted(
            (s for s in series if s.model_name == model),
            key=lambda s: s.temperature_bucket is not None,
        )
        figures.append(_figure(model, lines, colours, max(span, 1.0)))
    return "".join(figures)


def _figure(model: str, lines: Sequence[Series], colours: dict[str, str], span: float) -> str:
    drawn: list[str] = []
    legend: list[str] = []
    for line in lines:
        bucket = line.temperature_bucket
        colour = MODEL_COLOUR if bucket is None else colours[bucket]
        name = "model (vLLM counters)" if bucket is None else f"bucket {bucket}"
        kind = "model" if bucket is None else "bucket"
        drawn.insert(0, _polyline(line, colour, kind, span))
        legend.append(
            f"<li><i style='background:{colour}'></i>{html.escape(name)} "
            f"<b>{format_cell(line.latest)}</b></li>"
        )
    svg = (
        f"<svg class='chart' xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' "
        f"height='{HEIGHT}' viewBox='0 0 {WIDTH} {HEIGHT}' role='img' "
        f"aria-label='acceptance rate of {html.escape(model, quote=True)}'>"
        f"{_axes(span)}{''.join(drawn)}</svg>"
    )
    return (
        f"<figure class='chart'><figcaption>{html.escape(model)}</figcaption>{svg}"
        f"<ul class='legend'>{''.join(legend)}</ul></figure>"
    )


def _axes(span: float) -> str:
    parts = []
    for tick in Y_TICKS:
        y = _y(tick)
        parts.append(
            f"<line class='grid' x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y:.1f}' "
            f"y2='{y:.1f}' stroke='#e5e7eb' stroke-width='1'/>"
            f"<text x='{LEFT - 4}' y='{y + 3:.1f}' text-anchor='end'>{tick:g}</text>"
        )
    for step in range(4):
        age = span * (1 - step / 3)
        label = "now" if step == 3 else f"\u2212{duration(age)}"
        parts.append(
            f"<text x='{_x(age, span):.1f}' y='{HEIGHT - 6}' "
            f"text-anchor='{'start' if step == 0 else 'end' if step == 3 else 'middle'}'>"
            f"{label}</text>"
        )
    return f"<g class='axes' font-size='10' fill='#6b7280'>{''.join(parts)}</g>"


def _polyline(line: Series, colour: str, kind: str, span: float) -> str:
    """One polyline per unbroken run of points; a lone point is a dot; the latest point a marker."""
    width = 3 if kind == "model" else 2
    runs: list[list[tuple[float, float]]] = [[]]
    for age, value in line.points:
        if value is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((_x(age, span), _y(value)))
    bucket = html.escape(line.temperature_bucket or "", quote=True)
    attributes = (
        f"fill='none' stroke='{colour}' stroke-width='{width}' "
        "stroke-linejoin='round' stroke-linecap='round'"
    )
    parts = []
    for run in runs:
        if len(run) > 1:
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
            parts.append(f"<polyline {attributes} points='{points}'/>")
        elif run:
            parts.append(
                f"<circle cx='{run[0][0]:.1f}' cy='{run[0][1]:.1f}' r='{width / 2 + 0.5}' "
                f"fill='{colour}'/>"
            )
    if line.points and line.points[-1][1] is not None:
        x, y = runs[-1][-1]
        parts.append(
            f"<circle class='latest' cx='{x:.1f}' cy='{y:.1f}' r='{width + 0.5}' fill='{colour}'/>"
        )
    return f"<g class='series {kind}' data-bucket='{bucket}'>{''.join(parts)}</g>"


def duration(seconds: float) -> str:
    """``42 s``, ``2.5 min``, ``15 min``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f}".removesuffix(".0") + " min"


def _x(age: float, span: float) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * (1 - min(age, span) / span)


def _y(value: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - min(max(value, 0.0), 1.0))

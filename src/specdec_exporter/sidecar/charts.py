"""Inline SVG line charts of acceptance over time, one per model, drawn by the server: the page's
width, an absolute time axis, the threshold and break-even as dashed lines."""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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

WIDTH, HEIGHT = 1000, 230
"""The viewBox; the SVG takes the page's width and scales to it."""
LEFT, RIGHT, TOP, BOTTOM = 36, 12, 10, 24
Y_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
"""Seconds between time-axis labels: the smallest giving at most MAX_TIME_TICKS labels."""
MAX_TIME_TICKS = 8
THRESHOLD_COLOUR, BREAK_EVEN_COLOUR = "#b45309", "#a1140a"


@dataclass(frozen=True, slots=True)
class Reference:
    """A dashed horizontal line across a chart: the threshold t, the break-even acceptance."""

    label: str
    value: float
    colour: str


def bucket_colours(series: Sequence[Series]) -> dict[str, str]:
    """A colour per bucket label, by order of first appearance, so every chart uses the same."""
    labels = dict.fromkeys(s.temperature_bucket for s in series if s.temperature_bucket)
    return {
        label: BUCKET_COLOURS[index % len(BUCKET_COLOURS)] for index, label in enumerate(labels)
    }


def charts(
    series: Sequence[Series],
    span: float,
    *,
    now: float | None = None,
    references: Mapping[str, Sequence[Reference]] | None = None,
    caption_links: Mapping[str, str] | None = None,
) -> str:
    """One figure per model over the last ``span`` seconds: its own acceptance (thick, on top),
    its buckets' (thin) and its reference lines, with a legend. ``now``: the wall-clock time of
    the latest point (an absolute time axis, UTC); without it the axis counts back from "now"."""
    colours = bucket_colours(series)
    models = dict.fromkeys(s.model_name for s in series)
    figures = []
    for model in sorted(models):
        lines = sorted(
            (s for s in series if s.model_name == model),
            key=lambda s: s.temperature_bucket is not None,
        )
        figures.append(
            _figure(
                model,
                lines,
                colours,
                max(span, 1.0),
                now=now,
                references=(references or {}).get(model, ()),
                link=(caption_links or {}).get(model),
            )
        )
    return "".join(figures)


def _figure(
    model: str,
    lines: Sequence[Series],
    colours: dict[str, str],
    span: float,
    *,
    now: float | None,
    references: Sequence[Reference],
    link: str | None,
) -> str:
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
    for reference in references:
        legend.append(
            f"<li><i class='dashed' style='border-color:{reference.colour}'></i>"
            f"{html.escape(reference.label)} <b>{format_cell(reference.value)}</b></li>"
        )
    svg = (
        f"<svg class='chart' xmlns='http://www.w3.org/2000/svg' width='100%' "
        f"viewBox='0 0 {WIDTH} {HEIGHT}' role='img' "
        f"aria-label='acceptance rate of {html.escape(model, quote=True)}'>"
        f"{_axes(span, now)}{''.join(_reference(r) for r in references)}{''.join(drawn)}"
        f"{_reference_labels(references)}</svg>"
    )
    title = html.escape(model)
    if link is not None:
        title += f" <a href='{html.escape(link, quote=True)}'>Grafana dashboard</a>"
    axis = "time in UTC" if now is not None else "time before the latest poll"
    return (
        f"<figure class='chart'><figcaption>{title} <small>acceptance rate; {axis}</small>"
        f"</figcaption>{svg}<ul class='legend'>{''.join(legend)}</ul></figure>"
    )


LABEL_HEIGHT = 14
"""A reference label's height in viewBox units: two labels closer than this would overlap."""


def _reference(reference: Reference) -> str:
    """The dashed line, under the series."""
    y = _y(reference.value)
    return (
        f"<g class='reference' data-label='{html.escape(reference.label, quote=True)}'>"
        f"<line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y:.1f}' y2='{y:.1f}' "
        f"stroke='{reference.colour}' stroke-width='1.5' stroke-dasharray='7 5'/></g>"
    )


def _reference_labels(references: Sequence[Reference]) -> str:
    """The lines' labels over everything (a white halo keeps them legible across the series),
    each above its line, or below it where it would overlap the label above or the top."""
    labels = []
    taken: list[float] = []
    for reference in sorted(references, key=lambda r: r.value, reverse=True):
        line = _y(reference.value)
        y = line - 4
        if y - LABEL_HEIGHT < TOP or any(abs(y - other) < LABEL_HEIGHT for other in taken):
            y = line + LABEL_HEIGHT - 2
        taken.append(y)
        labels.append(
            f"<text class='reference-label' x='{WIDTH - RIGHT - 4}' y='{y:.1f}' "
            f"text-anchor='end' font-size='12' fill='{reference.colour}' stroke='#ffffff' "
            f"stroke-width='3' paint-order='stroke'>"
            f"{html.escape(reference.label)} {reference.value:.3g}</text>"
        )
    return "".join(labels)


def _axes(span: float, now: float | None) -> str:
    parts = []
    for tick in Y_TICKS:
        y = _y(tick)
        parts.append(
            f"<line class='grid' x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y:.1f}' "
            f"y2='{y:.1f}' stroke='#e5e7eb' stroke-width='1'/>"
            f"<text x='{LEFT - 5}' y='{y + 4:.1f}' text-anchor='end'>{tick:g}</text>"
        )
    parts += _time_ticks(span) if now is None else _clock_ticks(span, now)
    return f"<g class='axes' font-size='12' fill='#6b7280'>{''.join(parts)}</g>"


def _time_ticks(span: float) -> list[str]:
    """Relative labels: ``-15 min`` ... ``now``."""
    parts = []
    for step in range(4):
        age = span * (1 - step / 3)
        label = "now" if step == 3 else f"\u2212{duration(age)}"
        parts.append(
            f"<text x='{_x(age, span):.1f}' y='{HEIGHT - 6}' "
            f"text-anchor='{'start' if step == 0 else 'end' if step == 3 else 'middle'}'>"
            f"{label}</text>"
        )
    return parts


def clock_ticks(span: float, now: float) -> list[float]:
    """Round wall-clock times (Unix seconds) inside [now - span, now], at most MAX_TIME_TICKS."""
    step = next((s for s in TIME_STEPS if span / s <= MAX_TIME_TICKS), TIME_STEPS[-1])
    first = math.ceil((now - span) / step) * step
    return [float(first + i * step) for i in range(int((now - first) // step) + 1)]


def _clock_ticks(span: float, now: float) -> list[str]:
    ticks = clock_ticks(span, now)
    seconds = len(ticks) > 1 and ticks[1] - ticks[0] < 60
    parts = []
    for at in ticks:
        x = _x(now - at, span)
        label = time.strftime("%H:%M:%S" if seconds else "%H:%M", time.gmtime(at))
        anchor = "end" if x > WIDTH - RIGHT - 30 else "start" if x < LEFT + 30 else "middle"
        parts.append(
            f"<line class='grid' x1='{x:.1f}' x2='{x:.1f}' y1='{TOP}' y2='{HEIGHT - BOTTOM}' "
            f"stroke='#f0f1f3' stroke-width='1'/>"
            f"<text x='{x:.1f}' y='{HEIGHT - 6}' text-anchor='{anchor}'>{label}</text>"
        )
    return parts


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

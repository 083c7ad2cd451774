"""The live page at /: status, tables with coloured verdicts and charts; refreshes itself."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from specdec_exporter import __version__
from specdec_exporter.sidecar.charts import charts, duration
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.term import Cell, format_cell

Table = tuple[str, Sequence[str], Sequence[Sequence[Cell]]]
"""(title, headers, rows)."""

VERDICT_CLASSES = {
    "healthy": "v-ok",
    "borderline": "v-warn",
    "below threshold": "v-low",
    "disable": "v-bad",
    "not drafting": "v-idle",
    "not enabled": "v-idle",
}
"""Verdict name -> CSS class; any other name (a new verdict, legacy V0) is drawn neutral."""
OTHER_VERDICT = "v-other"
VERDICT_HEADER = "verdict"

REFRESH_SECONDS_MIN, REFRESH_SECONDS_MAX = 2, 60

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1f2937;
background:#f6f7f9}
header{background:#fff;border-bottom:1px solid #e5e7eb;padding:12px 24px}
h1{font-size:18px;margin:0 0 4px}h1 small{font-weight:400;color:#6b7280;font-size:13px}
h2{font-size:15px;margin:22px 0 8px}main{padding:4px 24px 24px}
header p{margin:2px 0;color:#374151}a{color:#1d4ed8}code{font-size:13px}
.badge{display:inline-block;padding:0 8px;border-radius:10px;font-weight:600}
.up{background:#d9f2e1;color:#0b6b2d}.down{background:#fbd5d2;color:#a1140a}
table{border-collapse:collapse;background:#fff;border:1px solid #e5e7eb}
th{background:#f3f4f6;text-align:left;font-weight:600;font-size:12px;color:#374151}
td,th{padding:4px 10px;border-bottom:1px solid #e5e7eb;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums}td.empty{color:#6b7280}
td.verdict span{display:inline-block;padding:0 9px;border-radius:10px;font-weight:600}
.v-ok span{background:#d9f2e1;color:#0b6b2d}.v-warn span{background:#fdf0c4;color:#7a5600}
.v-low span{background:#fde0c8;color:#9a3d00}.v-bad span{background:#fbd5d2;color:#a1140a}
.v-idle span{background:#eceff3;color:#4b5563}.v-other span{border:1px solid #d1d5db}
.charts{display:flex;flex-wrap:wrap;gap:16px}
figure.chart{margin:0;background:#fff;border:1px solid #e5e7eb;padding:8px 10px}
figcaption{font-weight:600;font-size:13px;margin-bottom:2px}
ul.legend{list-style:none;margin:4px 0 0;padding:0;font-size:12px;max-width:440px}
ul.legend li{display:inline-block;margin-right:12px}
ul.legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}
p.note{color:#6b7280;font-size:12px;max-width:60em}
"""


def refresh_seconds(interval: float) -> int:
    """The page reloads once per poll, within 2..60 s."""
    return max(REFRESH_SECONDS_MIN, min(REFRESH_SECONDS_MAX, math.ceil(interval)))


def render_page(state: PollState, vllm_url: str, tables: Sequence[Table], *, refresh: int) -> str:
    """The first table (the model rows), the charts, then the other tables."""
    status, badge = ("up", "up") if state.up else ("DOWN", "down")
    shown = state.history.seconds()
    drawn = charts(state.history.series(), shown)
    chart_section = (
        f"<h2>Acceptance rate over the last {duration(max(shown, 1.0))}</h2>"
        f"<div class='charts'>{drawn or '<p class=note>no data yet</p>'}</div>"
        "<p class='note'>One point per poll, each over the sidecar window; the thick line is "
        "the model's (vLLM's counters), the thin ones its temperature buckets (request tap). "
        "A break in a line: no figure for that poll.</p>"
    )
    first, *rest = [_table(*table) for table in tables] or [""]
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{refresh}'>"
        f"<title>specdec {status}: vllm-specdec-exporter</title><style>{STYLE}</style></head>"
        "<body><header>"
        f"<h1>vllm-specdec-exporter <small>{html.escape(__version__)}</small></h1>"
        f"<p>vLLM at <code>{html.escape(vllm_url)}</code> "
        f"<span class='badge {badge}' id='status'>{status}</span> · window "
        f"{state.window_seconds:.0f} s · refreshes every {refresh} s · "
        "<a href='/metrics'>/metrics</a> · <a href='/api/report'>/api/report</a> · "
        "<a href='/healthz'>/healthz</a> · <a href='/readyz'>/readyz</a></p></header><main>"
        f"{first}{chart_section}{''.join(rest)}"
        "<p class='note'>Acceptance rate = accepted / draft tokens; mean acceptance length "
        "L = 1 + accepted tokens / drafts; modelled speedup = L / (1 + k·c). Figures are over "
        "the sidecar window unless the title says since start.</p></main></body></html>"
    )


def verdict_class(name: str) -> str:
    return VERDICT_CLASSES.get(name, OTHER_VERDICT)


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = (
        "".join(
            "<tr>"
            + "".join(_cell(header, value) for header, value in zip(headers, row, strict=True))
            + "</tr>"
            for row in rows
        )
        or f"<tr><td class='empty' colspan='{len(headers)}'>no data yet</td></tr>"
    )
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def _cell(header: str, value: Cell) -> str:
    if header == VERDICT_HEADER and isinstance(value, str):
        return f"<td class='verdict {verdict_class(value)}'><span>{html.escape(value)}</span></td>"
    if value is None or isinstance(value, int | float):
        return f"<td class='n'>{format_cell(value, 1 if header.endswith('/s') else 3)}</td>"
    return f"<td>{html.escape(value)}</td>"

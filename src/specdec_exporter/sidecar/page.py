"""The live page at /: status, tables with coloured and explained verdicts, charts; refreshes
itself. Server-drawn HTML and SVG, no script, nothing fetched."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast, get_args

from specdec_exporter import __version__
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.model import DraftCost, DraftCostSource
from specdec_exporter.core.report import ALL_ENGINES, Entry, rows_to_show
from specdec_exporter.core.verdict import Criteria
from specdec_exporter.sidecar.charts import (
    BREAK_EVEN_COLOUR,
    THRESHOLD_COLOUR,
    Reference,
    charts,
    duration,
)
from specdec_exporter.sidecar.engine_config import probe_state_lines
from specdec_exporter.sidecar.explain import (
    DECISION_TABLE,
    VLLM_DOWN_SECTION,
    VLLM_NEVER_UP_SECTION,
    PageContext,
    basis,
    decided_by,
    runbook_section,
)
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.sidecar.sections import (
    LOAD_LEVELS_NOT_YET,
    LOAD_LEVELS_WHILE_DOWN,
    NO_LOAD_LEVELS,
    NO_STEPS,
    NO_TEMPERATURE_SPLIT,
    BucketLatency,
    LoadLevel,
    ScrapeStatus,
    Table,
    ago,
    latency_table,
    load_level_table,
    per_position_table,
    utc,
)
from specdec_exporter.term import Cell, format_cell

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
BUCKET_HEADER = "temperature bucket"

NO_DATA = "no data yet"
PROBE_REPORTS = "the engine probe inside vLLM reports: "
"""Before the probe's own reason for a split it turned off (its info series' ``reason``)."""
NO_FIGURES_WHILE_DOWN = "no figures while vLLM does not answer"

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
td,th{padding:4px 8px;border-bottom:1px solid #e5e7eb;white-space:nowrap}
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
tr.explained td{border-bottom:none;padding-bottom:0}tr.why td{font-size:12px;color:#4b5563;
padding:0 10px 4px 22px;white-space:normal}tr.why a{margin-left:6px;white-space:nowrap}
div.wide{overflow-x:auto}.charts figure.chart{flex:1 1 100%}svg.chart{display:block;max-width:100%}
ul.legend{max-width:none}ul.legend i.dashed{height:0;border-top:2px dashed;background:none}
section.down{background:#fff4f3;border:1px solid #f3b7b1;border-left:6px solid #a1140a;
padding:8px 16px;margin:16px 0}section.down h2{margin:4px 0 8px;color:#a1140a}
section.down td{color:#1f2937}p.mismatch{color:#9a3d00;font-weight:600}
table.facts th{background:none;font-size:13px;text-align:right;color:#4b5563}
table.facts{border:none;background:none}table.facts td,table.facts th{border:none;padding:2px 8px}
"""


def refresh_seconds(interval: float) -> int:
    """The page reloads once per poll, within 2..60 s."""
    return max(REFRESH_SECONDS_MIN, min(REFRESH_SECONDS_MAX, math.ceil(interval)))


@dataclass(frozen=True, slots=True)
class PageInputs:
    """What the page shows besides the poll state: its tables (the first: per model and engine),
    latency per bucket, where the temperature split comes from, and the load levels (None: the
    report has none, the engine probe is not there)."""

    tables: Sequence[Table]
    latencies: Sequence[BucketLatency] = ()
    temperature_split_source: str | None = None
    load_levels: Sequence[LoadLevel] | None = None
    engine_probe: Mapping[str, str] | None = None
    """The probe's info labels (/api/report's ``engine_probe``); None: no probe seen."""


def render_page(
    state: PollState,
    vllm_url: str,
    inputs: PageInputs,
    *,
    refresh: int,
    now: float,
    context: PageContext | None = None,
) -> str:
    """Header and scrape status, the verdicts, the charts, then the explaining tables."""
    context = context or PageContext()
    status, badge = ("up", "up") if state.up else ("DOWN", "down")
    why = _Explainer(state, context)
    empty = NO_DATA if state.up or not state.attempts else NO_FIGURES_WHILE_DOWN
    first, *rest = [_table(*table, why=why, empty=empty) for table in inputs.tables] or [""]
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{refresh}'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>specdec {status}: vllm-specdec-exporter</title><style>{STYLE}</style></head>"
        "<body><header>"
        f"<h1>vllm-specdec-exporter <small>{html.escape(__version__)}</small></h1>"
        f"<p>vLLM at <code>{html.escape(vllm_url)}</code> "
        f"<span class='badge {badge}' id='status'>{status}</span> {_last_scrape(state, now)}"
        f"{_window(state, context)} · refreshes every {refresh} s</p>"
        f"<p>{_links(context)}</p>{engine_probe_note(state)}</header><main>"
        f"{_down(state, context, now)}{first}{_charts(state, context)}"
        f"{_optional(per_position_table(_shown(state.report)), why)}"
        f"{_temperature_split(inputs)}{''.join(rest)}"
        f"{_latency(inputs)}{_load_levels(inputs, why, up=state.up)}"
        "<p class='note'>Acceptance rate a = accepted / draft tokens; mean acceptance length "
        "L = 1 + accepted tokens / drafts; modelled speedup = L / (1 + k·c); break-even: the a "
        "at which it is 1. The verdict: s &lt; 1 or break-even &gt; 1 → disable; a &lt; t → "
        "below threshold; a up to the top of the band → borderline; above → healthy. Figures "
        "are over the sidecar window unless the title says since start.</p></main></body></html>"
    )


def verdict_class(name: str) -> str:
    return VERDICT_CLASSES.get(name, OTHER_VERDICT)


def engine_probe_note(state: PollState) -> str:
    """The engine probe's state and vLLM's speculative config as it read it, the method and c
    the figures rest on, and a flag that vLLM's config contradicts (the flag wins, said here)."""
    choice = state.speculative
    if choice is None:
        return ""
    line = " · ".join(probe_state_lines(state.probe_seen.info, choice))
    note = f"<p id='engine-probe'>{html.escape(line)}</p>"
    if choice.mismatch is None:
        return note
    mismatch = html.escape(choice.mismatch)
    return f"{note}<p class='mismatch' id='speculative-config-mismatch'>{mismatch}</p>"


def _links(context: PageContext) -> str:
    links = [
        ("/metrics", "/metrics"),
        ("/api/report", "/api/report"),
        ("/healthz", "/healthz"),
        ("/readyz", "/readyz"),
        (context.runbook(None), "runbook"),
    ]
    grafana = context.grafana()
    if grafana is not None:
        links.append((grafana, "Grafana dashboard"))
    return " · ".join(
        f"<a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>" for href, text in links
    )


def _window(state: PollState, context: PageContext) -> str:
    """The configured window; while it is still filling, how much of it the figures cover.
    Never "window 0 s": without figures (vLLM down, one poll so far) only the setting."""
    covered = state.window_seconds if state.up else 0.0
    if context.window is None:
        return f" · window {covered:.0f} s" if covered > 0 else ""
    filling = 0 < covered < context.window - 0.5
    so_far = f" (figures over {covered:.0f} s so far)" if filling else ""
    return f" · window {context.window:g} s{so_far}"


def _last_scrape(state: PollState, now: float) -> str:
    """While vLLM answers, the header says when it last did and how long that took."""
    at = state.last_success_at
    if not state.up or at is None:
        return ""
    took = "" if state.scrape_duration is None else f", took {state.scrape_duration * 1000:.0f} ms"
    return f"· last scrape {utc(at)} ({ago(at, now)}){took}"


def _down(state: PollState, context: PageContext, now: float) -> str:
    """While vLLM does not answer: why, since when, how often (as Prometheus' /targets)."""
    if state.up:
        return ""
    status = ScrapeStatus.of(state)
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{html.escape(value)}</td></tr>"
        for name, value in status.facts(now)
    )
    section = VLLM_DOWN_SECTION if state.ever_up else VLLM_NEVER_UP_SECTION
    runbook = (
        f"<p><a href='{html.escape(context.runbook(section), quote=True)}'>runbook: "
        f"{section}</a> · the figures below are gone until a poll succeeds again</p>"
        if state.attempts
        else ""
    )
    return (
        f"<section class='down' id='vllm-down'><h2>{html.escape(status.headline())}</h2>"
        f"<table class='facts'>{rows}</table>{runbook}</section>"
    )


def _charts(state: PollState, context: PageContext) -> str:
    shown = state.history.seconds()
    series = state.history.series()
    references: dict[str, list[Reference]] = {}
    for model in {s.model_name for s in series}:
        threshold = context.criteria.threshold
        lines = references[model] = []
        entry = _model_entry(state.report, model)
        if entry is not None:
            threshold = entry.threshold
        lines.append(Reference("threshold t", threshold, THRESHOLD_COLOUR))
        if entry is not None and entry.break_even_acceptance_rate is not None:
            lines.append(
                Reference("break-even", entry.break_even_acceptance_rate, BREAK_EVEN_COLOUR)
            )
    links = {model: link for model in references if (link := context.grafana(model)) is not None}
    drawn = charts(
        series, shown, now=state.last_poll_at, references=references, caption_links=links
    )
    return (
        f"<h2>Acceptance rate over the last {duration(max(shown, 1.0))}</h2>"
        f"<div class='charts'>{drawn or '<p class=note>no data yet</p>'}</div>"
        "<p class='note'>One point per poll, each over the sidecar window; the thick line is "
        "the model's (vLLM's counters), the thin ones its temperature buckets. Dashed: the "
        "threshold t, and the break-even acceptance (below it, speculation is a net loss by the "
        "model). A break in a line: no figure for that poll.</p>"
    )


def _latency(inputs: PageInputs) -> str:
    if not inputs.latencies:
        return ""
    source = {"probe": "engine probe", "tap": "request tap"}.get(
        inputs.temperature_split_source or "tap", "request tap"
    )
    return _table(*latency_table(inputs.latencies, source)) + (
        "<p class='note'>TTFT and TPOT of streamed requests per temperature bucket. P50 and P90 "
        "are estimated from the histogram buckets as PromQL's histogram_quantile does (the "
        "Grafana panels' figures): linearly inside the bucket the quantile falls in, so they are "
        "only as precise as the bucket bounds and may sit on either side of the mean.</p>"
    )


def _shown(report: list[Entry]) -> list[Entry]:
    """The rows a person reads: no "all" row for a model with one engine (it repeats it)."""
    return rows_to_show(report, lambda e: (e.model_name, e.engine))


def _load_levels(inputs: PageInputs, why: _Explainer, *, up: bool) -> str:
    """The probe's load split; without figures, why: the probe's own reason when its split is
    off, vLLM down (the probe known from the last successful poll), or no probe at all."""
    if inputs.load_levels is None:
        probe = inputs.engine_probe
        note = NO_LOAD_LEVELS
        if probe is not None and probe.get(names.BATCH_SPLIT) == names.OFF:
            note = f"{PROBE_REPORTS}{probe.get(names.REASON, '')}"
        elif probe is not None:
            note = LOAD_LEVELS_NOT_YET if up else LOAD_LEVELS_WHILE_DOWN
        note = html.escape(note, quote=False)
        return f"<h2>Acceptance by load level</h2><p class='note'>{note}</p>"
    return _table(*load_level_table(inputs.load_levels), why=why)


def _temperature_split(inputs: PageInputs) -> str:
    """Where the temperature split would be, why it is not (the probe's own reason when its split
    is off), or which source feeds it when the probe's is off and the tap's is on."""
    probe = inputs.engine_probe
    off = probe is not None and probe.get(names.TEMPERATURE_SPLIT) == names.OFF
    reason = f"{PROBE_REPORTS}{(probe or {}).get(names.REASON, '')}"
    if inputs.temperature_split_source in (None, "none"):
        note = reason if off else NO_TEMPERATURE_SPLIT
        return (
            "<h2>Acceptance by temperature bucket</h2><p class='note' id='split-off'>"
            f"{html.escape(note, quote=False)}</p>"
        )
    if off:
        note = f"{reason}; the request tap feeds the split instead"
        return f"<p class='note' id='split-off'>{html.escape(note, quote=False)}</p>"
    return ""


def _optional(table: Table | None, why: _Explainer) -> str:
    return "" if table is None else _table(*table, why=why)


def _model_entry(report: Sequence[Entry], model: str) -> Entry | None:
    return next((e for e in report if e.model_name == model and e.engine == ALL_ENGINES), None)


class _Explainer:
    """The ``why`` cell of a row with a verdict: the deciding comparison, then t, c (its source),
    the method and k, then the runbook section."""

    def __init__(self, state: PollState, context: PageContext) -> None:
        self._state = state
        self._context = context

    def __call__(self, row: Mapping[str, Cell]) -> str:
        verdict = row.get(VERDICT_HEADER)
        model = row.get("model")
        if not isinstance(verdict, str) or not isinstance(model, str) or verdict == NO_STEPS:
            return ""
        cost, criteria, break_even = self._basis(model)
        snapshot = self._state.snapshot
        k = None if snapshot is None else snapshot.num_speculative_tokens(model)
        decided = decided_by(
            verdict,
            acceptance_rate=_float(row.get("acceptance rate")),
            speedup=_float(row.get("modelled speedup")),
            break_even=break_even,
            criteria=criteria,
        )
        section = runbook_section(
            verdict,
            bucket=BUCKET_HEADER in row,
            acceptance_rate=_float(row.get("acceptance rate")),
            criteria=criteria,
            cost=cost,
        )
        href = html.escape(self._context.runbook(section), quote=True)
        return (
            f"why: {html.escape(decided)} · {html.escape(basis(cost, criteria, k))}"
            f"<a href='{href}'>runbook: {html.escape(section or DECISION_TABLE)}</a>"
        )

    def _basis(self, model: str) -> tuple[DraftCost, Criteria, float | None]:
        """t and c from the model's own entry (what its verdicts used), else the settings'."""
        context = self._context
        entry = _model_entry(self._state.report, model)
        speculative = self._state.speculative  # the method may come from vLLM's config
        current = context.cost if speculative is None else speculative.cost
        if entry is None:
            return current, context.criteria, None
        cost = DraftCost(entry.draft_cost_ratio, _source(entry), current.method)
        criteria = Criteria(entry.threshold, max(entry.threshold, context.criteria.healthy_above))
        return cost, criteria, entry.break_even_acceptance_rate


def _source(entry: Entry) -> DraftCostSource:
    known = (s for s in get_args(DraftCostSource) if s == entry.draft_cost_ratio_source)
    return cast(DraftCostSource, next(known, "default"))


def _float(value: Cell) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    why: Callable[[Mapping[str, Cell]], str] | None = None,
    empty: str = NO_DATA,
) -> str:
    """A row with a verdict gets a second line under it: why (``why``), across the table."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    lines = []
    for row in rows:
        cells = "".join(_cell(header, value) for header, value in zip(headers, row, strict=True))
        explained = "" if why is None else why(dict(zip(headers, row, strict=True)))
        if explained:
            lines.append(
                f"<tr class='explained'>{cells}</tr><tr class='why'>"
                f"<td colspan='{len(headers)}'>{explained}</td></tr>"
            )
        else:
            lines.append(f"<tr>{cells}</tr>")
    body = "".join(lines) or f"<tr><td class='empty' colspan='{len(headers)}'>{empty}</td></tr>"
    return (
        f"<h2>{html.escape(title)}</h2><div class='wide'><table><tr>{head}</tr>{body}</table></div>"
    )


def _cell(header: str, value: Cell) -> str:
    if header == VERDICT_HEADER and value == NO_STEPS:
        return f"<td class='empty'>{NO_STEPS}</td>"
    if header == VERDICT_HEADER and isinstance(value, str):
        return f"<td class='verdict {verdict_class(value)}'><span>{html.escape(value)}</span></td>"
    if value is None or isinstance(value, int | float):
        digits = 1 if header.endswith(("/s", " ms")) else 3
        return f"<td class='n'>{format_cell(value, digits)}</td>"
    return f"<td>{html.escape(value)}</td>"

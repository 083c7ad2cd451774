"""What the live page explains, from literal data through the ASGI transport (no sockets): every
verdict's basis and runbook section, vLLM's scrape status while it is down, per-position
acceptance, latency per temperature bucket, load levels, and the charts' axis and lines."""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.registry import CollectorRegistry
from test_poller_collector import Clock, ScriptedSource

from probe_text import probe_text
from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.core.model import DraftCost
from specdec_exporter.sidecar.app import create_app, page_inputs
from specdec_exporter.sidecar.charts import clock_ticks
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.explain import (
    BUCKET_SECTIONS,
    MODEL_SECTIONS,
    VLLM_DOWN_SECTION,
    VLLM_NEVER_UP_SECTION,
    PageContext,
)
from specdec_exporter.sidecar.history import AcceptanceHistory
from specdec_exporter.sidecar.page import render_page
from specdec_exporter.sidecar.poller import Poller, PollState
from specdec_exporter.sidecar.runbook import RUNBOOK_LINK
from specdec_exporter.sidecar.scraper import ScrapeError
from specdec_exporter.sidecar.sections import (
    LOAD_LEVELS_WHILE_DOWN,
    MAX_ERROR_CHARS,
    NO_LOAD_LEVELS,
    NO_STEPS,
    NO_TEMPERATURE_SPLIT,
)
from specdec_exporter.tap.stats import RequestRecord, RequestStats
from variants import MODEL, capture

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).parents[2]
COST = DraftCost(0.1, "method", "draft_model")
RUNBOOK = "https://runbook.example/runbook.md"
GRAFANA = "https://grafana.example/d/vllm-specdec/vllm-speculative-decoding"
CONTEXT = PageContext(COST, runbook_url=RUNBOOK, grafana_dashboard_url=GRAFANA)
START = 1795662000.0
"""2026-11-26 03:00:00 UTC."""


class Wall:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


async def polled(bodies: list[str | ScrapeError], cost: DraftCost = COST) -> tuple[Poller, Wall]:
    clock, wall = Clock(), Wall()
    poller = Poller(
        ScriptedSource(bodies),
        interval=5,
        window=3600,
        cost=cost,
        log_interval=60,
        clock=clock,
        wall_clock=wall,
    )
    for _ in bodies:
        await poller.poll_once()
        clock.now += 5
        wall.now += 5
    return poller, wall


async def page_of(
    state: PollState,
    *,
    now: float,
    context: PageContext = CONTEXT,
    registry: CollectorRegistry | None = None,
) -> str:
    app = create_app(
        registry or CollectorRegistry(),
        state,
        lambda: None,
        "http://vllm:8000",
        refresh_every=5,
        page=context,
        clock=lambda: now,
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
        return (await client.get("/")).text


def why_lines(page: str) -> list[str]:
    return re.findall(r"<tr class='why'><td colspan='\d+'>(.*?)</td></tr>", page)


async def test_every_verdict_says_t_c_its_source_the_method_k_and_its_runbook_section() -> None:
    poller, wall = await polled([capture("t0"), capture("t3")])
    page = await page_of(poller.state, now=wall.now)
    verdicts = re.findall(r"<td class='verdict [^']+'><span>([^<]+)</span>", page)
    assert verdicts == ["healthy"]  # engine 0; with one engine no "all" row repeats it
    assert why_lines(page) == [
        "why: a 0.786 &gt; 0.65 · t 0.5 · c = 0.1 (default of method draft_model) · k 4"
        f"<a href='{RUNBOOK}'>runbook: decision table</a>"
    ]


async def test_a_flag_c_names_the_flag_and_method_and_a_loss_links_its_runbook_section() -> None:
    cost = DraftCost(0.9, "flag", "eagle3")  # s = L / (1 + 4 * 0.9) < 1: disable
    poller, wall = await polled([capture("t0"), capture("t3")], cost)
    page = await page_of(poller.state, now=wall.now, context=PageContext(cost, runbook_url=RUNBOOK))
    speedup = poller.state.report[-1].estimated_speedup
    assert speedup is not None and speedup < 1
    assert why_lines(page)[-1] == (
        f"why: modelled speedup {speedup:.2f} &lt; 1 · t 0.5 · c = 0.9 (--draft-cost-ratio) · "
        f"method eagle3 · k 4<a href='{RUNBOOK}#specdecodespeedupbelowone'>"
        "runbook: SpecDecodeSpeedupBelowOne</a>"
    )


def runbook_anchors() -> set[str]:
    """GitHub's anchors of docs/runbook.md's headings (the alert names, lower-cased)."""
    text = (ROOT / "docs" / "runbook.md").read_text()
    return {line.lstrip("#").strip().lower() for line in text.splitlines() if line.startswith("#")}


def test_every_runbook_link_of_the_page_has_its_section() -> None:
    sections = {*MODEL_SECTIONS.values(), *BUCKET_SECTIONS.values()}
    sections |= {VLLM_DOWN_SECTION, VLLM_NEVER_UP_SECTION}
    for section in sections:
        link = CONTEXT.runbook(section)
        assert link.partition("#")[2] in runbook_anchors(), link


def test_the_default_runbook_is_the_one_the_sidecar_serves() -> None:
    assert Settings().runbook_url is None
    assert PageContext.of(Settings()).runbook(None) == RUNBOOK_LINK
    assert Settings().grafana_dashboard_url is None


async def test_grafana_is_linked_per_model_only_when_configured() -> None:
    poller, wall = await polled([capture("t0"), capture("t3")])
    with_grafana = await page_of(poller.state, now=wall.now)
    model = MODEL.replace("/", "%2F")
    assert f"<a href='{GRAFANA}'>Grafana dashboard</a>" in with_grafana  # the header
    assert f"<a href='{GRAFANA}?var-model={model}'>Grafana dashboard</a>" in with_grafana
    without = await page_of(poller.state, now=wall.now, context=PageContext(COST))
    assert "Grafana" not in without
    assert f"<a href='{RUNBOOK_LINK}'>runbook</a>" in without


async def test_vllm_down_shows_the_reason_the_last_success_and_the_failure_counts() -> None:
    failure = ScrapeError("connect", "All connection attempts failed")
    poller, wall = await polled([capture("t0"), capture("t3"), failure, failure, failure])
    page = await page_of(poller.state, now=wall.now + 12)
    down = re.search(r"<section class='down' id='vllm-down'>(.*?)</section>", page)
    assert down is not None
    assert down.group(1) == (
        "<h2>vLLM is not answering</h2><table class='facts'>"
        "<tr><th>error</th><td>connect: All connection attempts failed</td></tr>"
        # polls at 03:00:00, :05 (the last success), :10, :15, :20; the page is read at :37
        "<tr><th>last successful scrape</th><td>2026-11-26 03:00:05 UTC (32 s ago)</td></tr>"
        "<tr><th>duration of that scrape</th><td>12 ms</td></tr>"
        "<tr><th>last poll</th><td>2026-11-26 03:00:20 UTC (17 s ago)</td></tr>"
        "<tr><th>failed polls in a row</th><td>3</td></tr>"
        "<tr><th>failures since start, by reason</th>"
        "<td>connect 3, timeout 0, http_status 0, parse 0, too_large 0, internal 0</td></tr>"
        "</table>"
        f"<p><a href='{RUNBOOK}#specdecodevllmunreachable'>runbook: SpecDecodeVLLMUnreachable</a>"
        " · the figures below are gone until a poll succeeds again</p>"
    )
    assert "<span class='badge down' id='status'>DOWN</span>" in page
    assert "no figures while vLLM does not answer" in page


async def test_vllm_never_up_says_so_and_links_its_own_section() -> None:
    poller, wall = await polled([ScrapeError("http_status", "HTTP 502")] * 2)
    page = await page_of(poller.state, now=wall.now)
    assert "<h2>vLLM has not answered since the sidecar started</h2>" in page
    assert "<tr><th>error</th><td>http_status: HTTP 502</td></tr>" in page
    assert "<td>never since the sidecar started</td>" in page
    assert f"{RUNBOOK}#specdecodevllmneverup" in page


async def test_a_recovered_vllm_clears_the_error_and_the_header_says_when_it_was_scraped() -> None:
    failure = ScrapeError("timeout", "slow")
    poller, wall = await polled([capture("t0"), failure, capture("t3")])
    assert (poller.state.last_error, poller.state.failed_in_a_row) == (None, 0)
    assert poller.state.last_success_at == poller.state.last_poll_at == START + 10
    page = await page_of(poller.state, now=wall.now)
    assert "vllm-down" not in page
    assert "· last scrape 2026-11-26 03:00:10 UTC (5 s ago), took 12 ms" in page


async def test_per_position_acceptance_per_model_and_engine() -> None:
    poller, wall = await polled([capture("t0"), capture("t3")])
    page = await page_of(poller.state, now=wall.now)
    title = "<h2>Acceptance per draft position (sidecar window)</h2>"
    table = re.search(re.escape(title) + "(.*?)</table>", page)
    assert table is not None
    rates = poller.state.report[-1].per_position_acceptance_rate
    assert len(rates) == 4
    assert "<th>position 0</th><th>position 1</th><th>position 2</th><th>position 3</th>" in (
        table.group(1)
    )
    cells = "".join(f"<td class='n'>{rate:.3f}</td>" for rate in rates)
    assert f"<tr><td>{MODEL}</td><td>0</td>{cells}</tr>" in table.group(1)
    assert "<td>all</td>" not in table.group(1)  # one engine: no "all" row repeating it


async def test_latency_per_temperature_bucket_from_the_exported_histograms() -> None:
    registry = CollectorRegistry()
    stats = RequestStats(TemperatureBuckets(), lambda model: 4)
    stats.register(registry)
    for ttft, tpot in ((0.03, 0.012), (0.03, 0.012), (0.07, 0.04), (0.3, 0.2)):
        stats.record(RequestRecord(MODEL, "0", None, ttft, tpot))
    page = await page_of(PollState(), now=START, registry=registry)
    # TTFT 0.03, 0.03 in (0.02, 0.04]; 0.07 in (0.06, 0.08]; 0.3 in (0.25, 0.5]:
    # P50 = rank 2 of the 2 in (0.02, 0.04] = 0.04;
    # P90 = rank 3.6 in (0.25, 0.5] = 0.25 + 0.25 * 0.6
    # TPOT 0.012, 0.012 in (0.01, 0.025]; 0.04 in (0.025, 0.05]; 0.2 in (0.15, 0.2]:
    # P50 = 0.025; P90 = 0.15 + 0.05 * 0.6
    assert "<h2>Latency by temperature bucket (request tap, since start)</h2>" in page
    assert (
        f"<tr><td>{MODEL}</td><td>0</td><td class='n'>4</td>"
        "<td class='n'>107.5</td><td class='n'>40.0</td><td class='n'>400.0</td>"
        "<td class='n'>66.0</td><td class='n'>25.0</td><td class='n'>180.0</td></tr>"
    ) in page
    assert f"<tr><td>{MODEL}</td><td>0-0.5</td><td class='n'>0</td>" in page


async def test_without_latency_histograms_there_is_no_latency_table() -> None:
    page = await page_of(PollState(), now=START)
    assert "Latency by temperature bucket" not in page


BATCH_BUCKETS: list[dict[str, Any]] = [
    {
        "model_name": MODEL,
        "engine": "0",
        "batch_bucket": "2-4",
        "steps": 120.0,
        "acceptance_rate": 0.8,
        "mean_acceptance_length": 4.2,
        "estimated_speedup": 3.0,
        "break_even_acceptance_rate": 0.1,
        "draft_cost_ratio": 0.1,
        "draft_cost_ratio_source": "method",
        "drafts": 100.0,
        "draft_tokens": 400.0,
        "accepted_tokens": 320.0,
        "verdict": "healthy",
    },
    {
        "model_name": MODEL,
        "engine": "0",
        "batch_bucket": "33-64",
        "steps": 30.0,
        "acceptance_rate": 0.3,
        "mean_acceptance_length": 2.2,
        "estimated_speedup": 1.57,
        "break_even_acceptance_rate": 0.1,
        "draft_cost_ratio": 0.1,
        "draft_cost_ratio_source": "method",
        "drafts": 30.0,
        "draft_tokens": 120.0,
        "accepted_tokens": 36.0,
        "verdict": "below threshold",
    },
]


def test_load_levels_render_from_the_reports_batch_buckets() -> None:
    """The engine probe's load split, as /api/report carries it (docs: probe contract)."""
    report = {"batch_buckets": BATCH_BUCKETS, "temperature_split_source": "probe"}
    inputs = page_inputs(report, [], CollectorRegistry())
    assert inputs.temperature_split_source == "probe"
    page = render_page(
        PollState(), "http://vllm:8000", inputs, refresh=5, now=START, context=CONTEXT
    )
    assert "<h2>Acceptance by load level (engine probe, sidecar window)</h2>" in page
    assert (
        f"<tr class='explained'><td>{MODEL}</td><td>0</td><td>33-64</td><td class='n'>30</td>"
        "<td class='n'>0.300</td><td class='n'>2.200</td><td class='n'>1.570</td>"
        "<td class='verdict v-low'><span>below threshold</span></td></tr>"
    ) in page
    assert why_lines(page)[-1].startswith("why: a 0.300 &lt; t 0.5; speedup 1.57 ≥ 1 · t 0.5 · ")
    assert NO_LOAD_LEVELS not in page


@pytest.mark.parametrize("report", [{}, {"temperature_split_source": "tap", "batch_buckets": []}])
def test_without_the_probe_the_load_level_section_says_what_it_needs(
    report: dict[str, object],
) -> None:
    inputs = page_inputs(report, [], CollectorRegistry())
    assert inputs.load_levels is None
    page = render_page(PollState(), "http://vllm:8000", inputs, refresh=5, now=START)
    assert f"<h2>Acceptance by load level</h2><p class='note'>{NO_LOAD_LEVELS}</p>" in page


async def test_charts_take_the_page_width_with_a_utc_axis_threshold_and_break_even() -> None:
    state = PollState(history=AcceptanceHistory(interval=60))
    for minute, value in enumerate((0.9, 0.8, 0.4, 0.2, 0.3, 0.1)):
        state.history.record(60.0 * minute, {(MODEL, None): value})
    poller, _ = await polled([capture("t0"), capture("t3")])
    state.report = poller.state.report
    state.last_poll_at = START + 300  # 03:05:00 UTC, the latest point
    page = await page_of(state, now=START + 301)
    assert "<svg class='chart' xmlns='http://www.w3.org/2000/svg' width='100%' " in page
    assert "viewBox='0 0 1000 230'" in page
    # five minutes shown: a label a minute, 03:00 .. 03:05, x = 36 + 952 * (1 - age / 300)
    labels = re.findall(r"<text x='([\d.]+)' y='224' text-anchor='\w+'>(\d\d:\d\d)</text>", page)
    assert labels == [
        ("36.0", "03:00"),
        ("226.4", "03:01"),
        ("416.8", "03:02"),
        ("607.2", "03:03"),
        ("797.6", "03:04"),
        ("988.0", "03:05"),
    ]
    assert "acceptance rate; time in UTC" in page
    # y = 10 + 196 * (1 - value): t 0.5 and the model's break-even (c = 0.1, every draft k long)
    assert (
        "<g class='reference' data-label='threshold t'><line x1='36' x2='988' y1='108.0' "
        "y2='108.0' stroke='#b45309'"
    ) in page
    assert "<g class='reference' data-label='break-even'><line x1='36' x2='988' y1='186.4'" in page
    assert ">threshold t 0.5</text>" in page and ">break-even 0.1</text>" in page


@pytest.mark.parametrize(
    ("span", "step"),
    [(6.0, 1.0), (40.0, 5.0), (300.0, 60.0), (900.0, 120.0), (36000.0, 3600.0)],
)
def test_time_labels_fall_on_round_clock_times(span: float, step: float) -> None:
    ticks = clock_ticks(span, START + 7)
    assert all(b - a == step for a, b in itertools.pairwise(ticks))
    assert all(tick % step == 0 for tick in ticks)
    assert START + 7 - span <= ticks[0] and ticks[-1] <= START + 7
    assert len(ticks) <= 8 or step == 3600.0


async def test_a_long_scrape_error_is_cut_and_escaped() -> None:
    poller, wall = await polled([ScrapeError("parse", "<b>" + "x" * 1000)])
    page = await page_of(poller.state, now=wall.now)
    shown = re.search(r"<tr><th>error</th><td>(.*?)</td></tr>", page)
    assert shown is not None
    assert shown.group(1) == "parse: &lt;b&gt;" + "x" * (MAX_ERROR_CHARS - len("parse: <b>"))


def test_with_the_probes_load_level_split_off_the_section_says_why() -> None:
    """Not "needs the engine probe" when the probe is there: its own reason (escaped)."""
    probe = {
        "version": "0.1.0",
        "vllm_version": "0.33.0",
        "temperature_split": "on",
        "batch_split": "off",
        "reason": "batch split off: invalid SPECDEC_BATCH_BUCKETS '4,<1'",
    }
    inputs = page_inputs({"engine_probe": probe}, [], CollectorRegistry())
    page = render_page(PollState(), "http://vllm:8000", inputs, refresh=5, now=START)
    assert (
        "<h2>Acceptance by load level</h2><p class='note'>the engine probe inside vLLM "
        "reports: batch split off: invalid SPECDEC_BATCH_BUCKETS '4,&lt;1'</p>"
    ) in page
    assert NO_LOAD_LEVELS not in page


# --- issue 29: the split off, vLLM down with the probe known, /api/report, empty buckets ---------


async def report_of(state: PollState, *, now: float, context: PageContext = CONTEXT) -> Any:
    app = create_app(
        CollectorRegistry(),
        state,
        lambda: None,
        "http://vllm:8000",
        refresh_every=5,
        page=context,
        clock=lambda: now,
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
        return (await client.get("/api/report")).json()


async def test_with_the_probes_temperature_split_off_the_page_says_why_where_it_would_be() -> None:
    """vLLM without --per-request-spec-decode-metrics: the probe turns its temperature split off
    and says why; the page says it where the per-bucket table would be, not only /api/report."""
    body = capture("t3") + probe_text(temperature_split=False)
    poller, wall = await polled([capture("t0") + probe_text(temperature_split=False), body])
    assert poller.state.temperature_split_source == "none"
    page = await page_of(poller.state, now=wall.now)
    assert (
        "<h2>Acceptance by temperature bucket</h2><p class='note' id='split-off'>the engine "
        "probe inside vLLM reports: temperature split off: vLLM runs without "
        "--per-request-spec-decode-metrics summary</p>"
    ) in page
    per_position = page.index("Acceptance per draft position")
    assert page.index("id='split-off'") > per_position, "where the bucket table would be"


async def test_without_probe_or_tap_the_page_says_there_is_no_temperature_split() -> None:
    poller, wall = await polled([capture("t0"), capture("t3")])
    page = await page_of(poller.state, now=wall.now)
    assert f"<p class='note' id='split-off'>{NO_TEMPERATURE_SPLIT}</p>" in page


def test_with_the_probes_split_off_and_the_tap_on_the_page_says_which_feeds_it() -> None:
    probe = {
        "version": "0.1.0",
        "vllm_version": "0.33.0",
        "temperature_split": "off",
        "batch_split": "on",
        "reason": "temperature split off: <why>",
    }
    report = {"engine_probe": probe, "temperature_split_source": "tap"}
    inputs = page_inputs(report, [], CollectorRegistry())
    page = render_page(PollState(), "http://vllm:8000", inputs, refresh=5, now=START)
    assert (
        "the engine probe inside vLLM reports: temperature split off: &lt;why&gt;; the "
        "request tap feeds the split instead"
    ) in page


async def test_while_vllm_is_down_the_load_levels_use_the_probe_known_from_the_last_poll() -> None:
    failure = ScrapeError("connect", "All connection attempts failed")
    up, wall = await polled([capture("t0") + probe_text(), capture("t3") + probe_text(rounds=2)])
    up_page = await page_of(up.state, now=wall.now)
    assert "Acceptance by load level (engine probe, sidecar window)" in up_page
    down, wall = await polled(
        [capture("t0") + probe_text(), capture("t3") + probe_text(rounds=2), failure]
    )
    page = await page_of(down.state, now=wall.now)
    assert f"<h2>Acceptance by load level</h2><p class='note'>{LOAD_LEVELS_WHILE_DOWN}</p>" in (
        page
    )
    assert NO_LOAD_LEVELS not in page


async def test_the_report_carries_the_error_details_the_page_shows_and_no_window_of_0_s() -> None:
    failure = ScrapeError("connect", "All connection attempts failed")
    poller, wall = await polled([capture("t0"), capture("t3"), failure, failure])
    context = PageContext(COST, runbook_url=RUNBOOK, window=3600)
    report = await report_of(poller.state, now=wall.now + 3, context=context)
    page = await page_of(poller.state, now=wall.now + 3, context=context)
    scrape = report["scrape"]
    assert scrape["headline"] == "vLLM is not answering"
    assert scrape["error"] == "connect: All connection attempts failed"
    assert (scrape["failed_in_a_row"], scrape["failures"]["connect"]) == (2, 2)
    assert scrape["last_success_at"] == START + 5 and scrape["last_poll_at"] == START + 15
    for name, value in scrape["facts"].items():  # the page's facts, word for word
        assert f"<tr><th>{name}</th><td>{value}</td></tr>" in page
    assert report["window_seconds"] is None and report["configured_window_seconds"] == 3600
    assert " · window 3600 s · " in page and "window 0 s" not in page


async def test_the_header_says_how_much_of_the_window_the_figures_cover_while_it_fills() -> None:
    poller, wall = await polled([capture("t0"), capture("t3")])
    context = PageContext(COST, runbook_url=RUNBOOK, window=60)
    page = await page_of(poller.state, now=wall.now, context=context)
    assert " · window 60 s (figures over 5 s so far) · " in page
    report = await report_of(poller.state, now=wall.now, context=context)
    assert report["window_seconds"] == 5.0 and report["scrape"]["error"] is None


def test_an_empty_load_level_bucket_is_not_a_verdict_and_steps_are_whole() -> None:
    empty = {
        **BATCH_BUCKETS[0],
        "batch_bucket": "65+",
        "steps": 0.0,
        "acceptance_rate": None,
        "mean_acceptance_length": None,
        "estimated_speedup": None,
        "verdict": "not drafting",
    }
    report = {"batch_buckets": [*BATCH_BUCKETS, empty], "temperature_split_source": "probe"}
    inputs = page_inputs(report, [], CollectorRegistry())
    page = render_page(
        PollState(), "http://vllm:8000", inputs, refresh=5, now=START, context=CONTEXT
    )
    assert f"<td>{MODEL}</td><td>0</td><td>2-4</td><td class='n'>120</td>" in page
    row = re.search(r"<tr><td>[^<]*</td><td>0</td><td>65\+</td>(.*?)</tr>", page)
    assert row is not None, "the empty bucket's row, with no why line under it"
    assert row.group(1).endswith(f"<td class='empty'>{NO_STEPS}</td>")
    assert "not drafting" not in page and "#specdecodenotdrafting" not in page


def test_reference_labels_are_drawn_over_the_lines_and_never_over_each_other() -> None:
    """The break-even label was overdrawn by the series: labels now come after every series,
    with a white halo, and a label that would overlap another goes below its line."""
    from specdec_exporter.sidecar.charts import Reference, charts  # noqa: PLC0415
    from specdec_exporter.sidecar.history import Series  # noqa: PLC0415

    line = Series(MODEL, None, tuple((float(age), 0.12) for age in range(60, -1, -5)))
    bucket = Series(MODEL, "0", tuple((float(age), 0.11) for age in range(60, -1, -5)))
    drawn = charts(
        [line, bucket],
        60,
        references={
            MODEL: [Reference("threshold t", 0.15, "#b45309"), Reference("break-even", 0.1, "#a")]
        },
    )
    last_series = drawn.rindex("<g class='series")
    labels = re.findall(
        r"<text class='reference-label' [^>]*y='([\d.]+)'[^>]*>([^<]*)</text>", drawn
    )
    assert [text for _, text in labels] == ["threshold t 0.15", "break-even 0.1"]
    assert drawn.index("class='reference-label'") > last_series, "labels on top of the lines"
    assert "paint-order='stroke'" in drawn
    (t_y, _), (break_even_y, _) = labels
    assert abs(float(t_y) - float(break_even_y)) >= 14, "the two labels overlap"


def test_a_disable_verdict_links_the_alert_that_fires_for_it() -> None:
    """At 3 am the link next to `disable` must open the section of the alert that woke the
    reader: AcceptanceLow pages while a < t (SpeedupBelowOne waits for a >= t), and a net loss
    on an assumed c tickets under its own name."""
    from specdec_exporter.core.model import DraftCost  # noqa: PLC0415
    from specdec_exporter.sidecar.explain import runbook_section  # noqa: PLC0415

    measured, assumed = DraftCost(0.9, "calibration"), DraftCost(0.1, "method")
    section = functools.partial(runbook_section, "disable", bucket=False)
    assert section(acceptance_rate=0.3, cost=measured) == "SpecDecodeAcceptanceLow"
    assert section(acceptance_rate=0.3, cost=assumed) == "SpecDecodeAcceptanceLow"
    assert section(acceptance_rate=0.6, cost=measured) == "SpecDecodeSpeedupBelowOne"
    assert section(acceptance_rate=0.6, cost=assumed) == "SpecDecodeSpeedupBelowOneAssumedCost"
    assert runbook_section("disable", bucket=True, acceptance_rate=0.3, cost=measured) == (
        "SpecDecodeSpeedupBelowOne"
    )

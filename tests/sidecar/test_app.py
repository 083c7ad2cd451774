"""The sidecar's HTTP endpoints and live page, through the ASGI transport (no sockets)."""

from __future__ import annotations

import dataclasses
import re

import httpx
import pytest
from prometheus_client.registry import CollectorRegistry
from test_poller_collector import Clock, ScriptedSource, poll_all

from specdec_exporter.core.model import DraftCost
from specdec_exporter.sidecar.app import create_app
from specdec_exporter.sidecar.charts import duration
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.explain import PageContext
from specdec_exporter.sidecar.history import AcceptanceHistory
from specdec_exporter.sidecar.page import refresh_seconds, verdict_class
from specdec_exporter.sidecar.poller import Poller, PollState
from specdec_exporter.sidecar.tap_parts import TapParts
from specdec_exporter.tap.spec import SpecDecodeSummary
from specdec_exporter.tap.stats import RequestRecord
from variants import MODEL, capture

COST = DraftCost(0.1, "method", "ngram")

pytestmark = pytest.mark.anyio
GOOD = SpecDecodeSummary(spec_steps=25, draft_tokens=100, accepted_tokens=90, spec_tokens=4)
BAD = SpecDecodeSummary(spec_steps=25, draft_tokens=100, accepted_tokens=10, spec_tokens=4)


def client_for(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar")


async def test_metrics_health_and_landing() -> None:
    poller, registry = await poll_all([capture("t0"), capture("t3")])
    app = create_app(registry, poller.state, lambda: None, "http://vllm:8000", refresh_every=5)
    async with client_for(app) as client:
        metrics = await client.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert f'specdec_drafts_total{{engine="0",model_name="{MODEL}"}} 7380.0' in metrics.text
        openmetrics = await client.get(
            "/metrics", headers={"Accept": "application/openmetrics-text"}
        )
        assert openmetrics.text.endswith("# EOF\n")
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200
        landing = await client.get("/")
        assert "Acceptance per model and engine" in landing.text
        assert MODEL in landing.text
        assert "<td class='verdict v-ok'><span>healthy</span></td>" in landing.text
        assert "href='/metrics'" in landing.text
        assert "<meta http-equiv='refresh' content='5'>" in landing.text
        assert "<th>temperature bucket</th>" not in landing.text  # no tap, no bucket table
        report = (await client.get("/api/report")).json()
        assert report["up"] is True
        assert report["entries"][-1]["engine"] == "all"
        assert report["entries"][-1]["drafts"] == 7380.0
        # One engine: the JSON keeps the "all" entry, the table does not repeat it.
        assert [row[:2] for row in report["tables"][0]["rows"]] == [[MODEL, "0"]]
        assert report["buckets"] == []
        assert report["engine_probe"] is None  # no probe in this vLLM


async def test_bucket_rows_cover_the_window_and_since_start_is_shown_beside_it() -> None:
    """The drafter degrades: the bucket reads its window (0.1, below threshold), not its past."""
    tap = TapParts(Settings(proxy_listen="127.0.0.1:0"))
    clock = Clock()
    poller = Poller(
        ScriptedSource([capture(t) for t in ("t0", "t1", "t2", "t3")]),
        interval=5,
        window=10,
        cost=COST,
        log_interval=60,
        clock=clock,
        tap_counts=tap.attributed,
    )
    for requests in ([GOOD] * 30, [GOOD] * 10, [BAD] * 2, [BAD] * 2):
        for spec in requests:
            tap.stats.record(RequestRecord(MODEL, "0", spec))
        await poller.poll_once()
        clock.now += 5
    app = create_app(
        CollectorRegistry(),
        poller.state,
        lambda: None,
        "http://vllm:8000",
        tap.landing_tables,
        refresh_every=5,
        page=PageContext(COST, runbook_url="https://runbook.example/r.md"),
    )
    async with client_for(app) as client:
        report = (await client.get("/api/report")).json()
        page = (await client.get("/")).text
    # window: the last two intervals, 4 bad requests: 40 / 400; since start: 3640 / 4400
    greedy = next(b for b in report["buckets"] if b["temperature_bucket"] == "0")
    assert greedy == {
        "model_name": MODEL,
        "temperature_bucket": "0",
        "acceptance_rate": 0.1,
        "mean_acceptance_length": 1.4,
        "drafts": 100.0,
        "draft_tokens": 400.0,
        "accepted_tokens": 40.0,
        "drafts_per_second": 10.0,
        "estimated_speedup": pytest.approx(1.0),
        "verdict": "below threshold",
        "break_even_acceptance_rate": 0.1,
        "threshold": 0.5,
        "draft_cost_ratio": 0.1,
        "draft_cost_ratio_source": "method",
    }
    window, since_start = report["tables"][1:]
    assert window["title"].endswith("(request tap, sidecar window)")
    assert window["headers"][:3] == ["model", "temperature bucket", "acceptance rate"]
    assert window["rows"][0] == [MODEL, "0", 0.1, 1.4, pytest.approx(1.0), 10.0, "below threshold"]
    assert [row[1] for row in window["rows"]] == ["0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+"]
    assert window["rows"][1][2:] == [None, None, None, 0.0, "not drafting"]
    assert since_start["title"].endswith("since start)")
    assert since_start["rows"][0][:5] == [MODEL, "0", 44, 44, 3640 / 4400]
    assert (
        f"<tr class='explained'><td>{MODEL}</td><td>0</td><td class='n'>0.100</td>"
        "<td class='n'>1.400</td><td class='n'>1.000</td><td class='n'>10.0</td>"
        "<td class='verdict v-low'><span>below threshold</span></td></tr>"
        "<tr class='why'><td colspan='7'>why: a 0.100 &lt; t 0.5; speedup 1.00 ≥ 1 · t 0.5 · "
        "c = 0.1 (default of method ngram) · k 4"
        "<a href='https://runbook.example/r.md#specdecodebucketacceptancelow'>"
        "runbook: SpecDecodeBucketAcceptanceLow</a></td></tr>"
    ) in page
    assert "<td class='n'>0.827</td>" in page
    assert (
        "<td>0-0.5</td><td class='n'>-</td><td class='n'>-</td><td class='n'>-</td>"
        "<td class='n'>0.0</td><td class='verdict v-idle'><span>not drafting</span>"
    ) in page
    assert "<svg class='chart'" in page and "data-bucket='0'" in page


def test_verdicts_are_coloured_by_name_with_a_neutral_default() -> None:
    assert [
        verdict_class(name)
        for name in (
            "healthy",
            "borderline",
            "below threshold",
            "disable",
            "not drafting",
            "not enabled",
        )
    ] == ["v-ok", "v-warn", "v-low", "v-bad", "v-idle", "v-idle"]
    assert verdict_class("legacy V0: see its own gauges") == "v-other"
    assert verdict_class("a verdict added later") == "v-other"


def test_page_refreshes_about_once_per_poll_within_bounds() -> None:
    assert [refresh_seconds(s) for s in (0.2, 2.5, 5, 60, 3600)] == [2, 3, 5, 60, 60]


async def test_charts_are_inline_svg_of_the_history() -> None:
    state = PollState(history=AcceptanceHistory(interval=450))
    state.history.record(1000.0, {(MODEL, None): 1.0, (MODEL, "0"): 0.25})
    state.history.record(1450.0, {(MODEL, None): 0.5})
    state.history.record(1900.0, {(MODEL, None): 0.75, (MODEL, "0"): 0.5})
    app = create_app(CollectorRegistry(), state, lambda: None, "http://vllm:8000", refresh_every=5)
    async with client_for(app) as client:
        page = (await client.get("/")).text
    assert not re.search(r"<script|<link|src=", page)  # drawn by the server, nothing to fetch
    # x: 36 + 952 * (1 - age / 900); y: 10 + 196 * (1 - acceptance)
    assert (
        "<g class='series model' data-bucket=''><polyline fill='none' stroke='#000000' "
        "stroke-width='3' stroke-linejoin='round' stroke-linecap='round' "
        "points='36.0,10.0 512.0,108.0 988.0,59.0'/>"
    ) in page
    # the bucket had no figure at the middle poll: two lone dots, no line across the gap
    assert (
        "<g class='series bucket' data-bucket='0'>"
        "<circle cx='36.0' cy='157.0' r='1.5' fill='#0072b2'/>"
        "<circle cx='988.0' cy='108.0' r='1.5' fill='#0072b2'/>"
        "<circle class='latest' cx='988.0' cy='108.0' r='2.5' fill='#0072b2'/></g>"
    ) in page
    assert "bucket 0 <b>0.500</b>" in page and "model (vLLM counters) <b>0.750</b>" in page
    assert page.index("class='series bucket'") < page.index("class='series model'")  # on top
    assert "over the last 15 min</h2>" in page and "\u221215 min</text>" in page
    assert "\u22125 min</text>" in page and ">now</text>" in page


def test_axis_durations() -> None:
    assert [duration(s) for s in (0.4, 42, 119.6, 150, 900)] == [
        "0 s",
        "42 s",
        "120 s",
        "2.5 min",
        "15 min",
    ]


async def test_not_ready_until_first_poll_and_healthz_never_depends_on_vllm() -> None:
    app = create_app(
        CollectorRegistry(),
        PollState(),
        lambda: "first poll not done",
        "http://vllm:8000",
        refresh_every=5,
    )
    async with client_for(app) as client:
        readyz = await client.get("/readyz")
        assert (readyz.status_code, readyz.text) == (503, "not ready: first poll not done\n")
        assert (await client.get("/healthz")).status_code == 200
        page = (await client.get("/")).text
        assert "<span class='badge down' id='status'>DOWN</span>" in page
        assert "no data yet" in page


async def test_landing_escapes_model_and_bucket_names() -> None:
    state = PollState()
    state.history.record(0.0, {("<b>m</b>", "<i>"): 0.5, ("<b>m</b>", None): 0.5})
    app = create_app(CollectorRegistry(), state, lambda: None, "http://x/<script>", refresh_every=5)
    async with client_for(app) as client:
        page = (await client.get("/")).text
    assert not re.search(r"<script|<b>m|<i>", page)
    assert "&lt;b&gt;m&lt;/b&gt;" in page and "data-bucket='&lt;i&gt;'" in page


@pytest.mark.parametrize(("source", "shown"), [("tap", True), ("probe", False)])
async def test_the_taps_since_start_table_is_gone_while_the_probe_feeds_the_split(
    source: str, shown: bool
) -> None:
    """Its counts are withheld then (one source at a time): no table, rather than an empty one
    that reads as "no data yet"."""
    tap = TapParts(Settings(proxy_listen="127.0.0.1:0"))
    state = PollState(temperature_split_source=source)  # type: ignore[arg-type]
    app = create_app(
        CollectorRegistry(),
        state,
        lambda: None,
        "http://vllm:8000",
        tap.landing_tables,
        refresh_every=5,
    )
    async with client_for(app) as client:
        report = (await client.get("/api/report")).json()
        page = (await client.get("/")).text
    titles = [table["title"] for table in report["tables"]]
    since_start = "Acceptance by temperature bucket (request tap, since start)"
    assert (since_start in titles) is shown
    assert (since_start in page) is shown


async def test_api_report_writes_a_figure_that_is_not_finite_as_null() -> None:
    """Whatever field holds NaN or ±Inf, /api/report answers 200 with null (JSON has neither)."""
    poller, registry = await poll_all([capture("t0"), capture("t3")])
    state = poller.state
    state.window_seconds = float("inf")
    state.report = [
        dataclasses.replace(e, acceptance_rate=float("nan"), estimated_speedup=float("-inf"))
        for e in state.report
    ]
    app = create_app(registry, state, lambda: None, "http://vllm:8000", refresh_every=5)
    async with client_for(app) as client:
        answer = await client.get("/api/report")
    assert answer.status_code == 200
    report = answer.json()
    assert report["window_seconds"] is None
    assert {(e["acceptance_rate"], e["estimated_speedup"]) for e in report["entries"]} == {
        (None, None)
    }

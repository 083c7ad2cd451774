"""The sweep runner against a fake vLLM (in-process ASGI) whose counters match its responses."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest
from sweep_fake_vllm import BASE_ACCEPTED, DRAFTED, MODEL, STEPS, FakeSpecVllm

from specdec_exporter.core.verdict import Verdict
from specdec_exporter.devtools.sweep.config import SweepConfig
from specdec_exporter.devtools.sweep.phase import PhaseAcceptance, PhaseRow
from specdec_exporter.devtools.sweep.runner import SweepError, SweepProgress, SweepResult, run_sweep

pytestmark = pytest.mark.anyio

REQUESTS = 5  # one full cycle of the fake's offsets: each phase's mean is exactly its base
TEMPERATURES = (0.0, 0.4, 0.8, 1.0)


class HostRouter(httpx.AsyncBaseTransport):
    """Sends each request to the ASGI app registered for its host (a tap and a vLLM, say)."""

    def __init__(self, apps: dict[str, Any]) -> None:
        self._routes = {host: httpx.ASGITransport(app=app) for host, app in apps.items()}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._routes[request.url.host].handle_async_request(request)


def config(**overrides: Any) -> SweepConfig:
    settings: dict[str, Any] = {
        "url": "http://vllm.test",
        "temperatures": TEMPERATURES,
        "requests": REQUESTS,
        "concurrency": 2,
        "seed": 3,
        "settle_interval": 0.005,
        "settle_timeout": 5.0,
    }
    settings.update(overrides)
    return SweepConfig(**settings)


async def sweep(fake: FakeSpecVllm, **overrides: Any) -> SweepResult:
    return await run_sweep(config(**overrides), transport=httpx.ASGITransport(app=fake))


def acceptance(row: PhaseRow) -> PhaseAcceptance:
    assert row.acceptance is not None
    return row.acceptance


def expected_counts(temperature: float) -> tuple[float, float, float]:
    return (REQUESTS * STEPS, REQUESTS * DRAFTED, REQUESTS * BASE_ACCEPTED[temperature])


async def test_per_request_source_gives_exact_figures_and_spread() -> None:
    fake = FakeSpecVllm()
    result = await sweep(fake)
    assert (result.model, result.source) == (MODEL, "per-request")
    assert [row.label for row in result.rows] == ["0.0", "0.4", "0.8", "1.0"]
    for row, temperature in zip(result.rows, TEMPERATURES, strict=True):
        figures, base = acceptance(row), BASE_ACCEPTED[temperature]
        assert figures.source == "per-request"
        assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (
            expected_counts(temperature)
        )
        assert figures.acceptance_rate == base / 40
        assert figures.mean_acceptance_length == 1 + base / 10
        # Per-request accepted base-4, base-2, base, base+2, base+4 out of 40.
        assert figures.rate_percentiles == pytest.approx(
            ((base - 3.2) / 40, base / 40, (base + 3.2) / 40)
        )
        assert (figures.requests_with_metrics, figures.requests_not_drafting) == (5, 0)
        assert (row.load.requests, row.load.errors, row.counters_settled) == (5, 0, None)
        assert row.load.output_tokens == REQUESTS * STEPS + REQUESTS * base
    assert [acceptance(row).verdict for row in result.rows] == [
        Verdict.HEALTHY,
        Verdict.HEALTHY,
        Verdict.BORDERLINE,
        Verdict.BELOW_THRESHOLD,
    ]
    assert fake.scrapes == 1  # auto reads the counters once, in case it needs them


async def test_counters_source_is_exact_with_late_counters_on_two_engines() -> None:
    # Counts reach /metrics only from the 4th scrape after a phase: two quick scrapes agree on
    # stale values first, so only the generation-token check can tell the phase is not in yet.
    fake = FakeSpecVllm(per_request_metrics=False, lag_scrapes=3, engines=2)
    result = await sweep(fake)
    assert result.source == "counters"
    for row, temperature in zip(result.rows, TEMPERATURES, strict=True):
        figures = acceptance(row)
        assert figures.source == "counters"
        assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (
            expected_counts(temperature)
        )
        assert figures.acceptance_rate == BASE_ACCEPTED[temperature] / 40
        assert figures.rate_percentiles == (None, None, None)
        assert figures.requests_with_metrics is None
        assert row.counters_settled is True
    assert [totals.drafts for totals in fake.totals] == [100, 100]  # both engines served


async def test_both_sources_agree_exactly_on_the_same_traffic() -> None:
    by_request = await sweep(FakeSpecVllm(), source="per-request")
    by_counters = await sweep(FakeSpecVllm(), source="counters")
    for left, right in zip(by_request.rows, by_counters.rows, strict=True):
        one, other = acceptance(left), acceptance(right)
        assert (one.source, other.source) == ("per-request", "counters")
        assert (one.drafts, one.draft_tokens, one.accepted_tokens) == (
            other.drafts,
            other.draft_tokens,
            other.accepted_tokens,
        )
        assert one.acceptance_rate == other.acceptance_rate
        assert one.mean_acceptance_length == other.mean_acceptance_length


async def test_explicit_per_request_never_scrapes() -> None:
    fake = FakeSpecVllm()
    result = await sweep(fake, source="per-request")
    assert result.source == "per-request"
    assert fake.scrapes == 0


async def test_auto_takes_counters_when_some_responses_lack_metrics() -> None:
    fake = FakeSpecVllm(drop_metrics_every=3)
    result = await sweep(fake, temperatures=(0.0, 1.0))
    assert result.source == "counters"
    assert [acceptance(row).accepted_tokens for row in result.rows] == [160, 60]


async def test_forced_per_request_counts_only_requests_with_metrics() -> None:
    fake = FakeSpecVllm(drop_metrics_every=5)  # the 1st and 6th responses have no metrics
    result = await sweep(fake, temperatures=(0.0, 1.0), source="per-request")
    assert [acceptance(row).requests_with_metrics for row in result.rows] == [4, 4]
    assert [acceptance(row).draft_tokens for row in result.rows] == [160, 160]


async def test_a_failed_phase_has_no_figures_and_the_rest_still_run() -> None:
    fake = FakeSpecVllm(per_request_metrics=False, fail_at={0.4})
    result = await sweep(fake, temperatures=(0.0, 0.4, 1.0))
    failed = result.rows[1]
    assert (failed.label, failed.acceptance, failed.succeeded) == ("0.4", None, 0)
    assert failed.load.errors_by_kind == {"http_500": 5}
    assert acceptance(result.rows[2]).accepted_tokens == 60  # the failed phase moved nothing


async def test_auto_waits_for_a_successful_phase_to_choose() -> None:
    fake = FakeSpecVllm(fail_at={0.0})
    result = await sweep(fake, temperatures=(0.0, 0.8))
    assert result.source == "per-request"
    assert result.rows[0].acceptance is None
    assert acceptance(result.rows[1]).acceptance_rate == 0.5


async def test_streams_carry_metrics_on_the_usage_chunk_and_give_latencies() -> None:
    fake = FakeSpecVllm()
    result = await sweep(fake, temperatures=(0.8,), stream=True)
    row = result.rows[0]
    assert acceptance(row).accepted_tokens == 100
    assert row.load.ttft_p50 is not None
    assert row.load.tpot_p50 is not None


async def test_every_temperature_gets_the_same_prompts() -> None:
    fake = FakeSpecVllm()
    await sweep(fake, requests=12, concurrency=3)
    prompts = {
        t: Counter(s.prompt for s in fake.served if s.temperature == t) for t in TEMPERATURES
    }
    assert len(prompts[0.0]) > 1  # several different prompts...
    assert all(p == prompts[0.0] for p in prompts.values())  # ...the same at each temperature


async def test_counters_on_another_server_with_metrics_url() -> None:
    fake = FakeSpecVllm(per_request_metrics=False)
    router = HostRouter({"tap.test": fake.api_app, "vllm.test": fake.metrics_app})
    result = await run_sweep(
        config(url="http://tap.test", metrics_url="http://vllm.test", temperatures=(0.4,)),
        transport=router,
    )
    assert acceptance(result.rows[0]).acceptance_rate == 0.7


async def test_counters_without_a_readable_metrics_page_fail_before_any_load() -> None:
    fake = FakeSpecVllm(metrics_status=500)
    with pytest.raises(SweepError, match=r"cannot read http://vllm.test/metrics \(http_status"):
        await sweep(fake, source="counters")
    assert fake.served == []


async def test_auto_without_metrics_anywhere_says_what_to_do() -> None:
    fake = FakeSpecVllm(per_request_metrics=False)
    transport = httpx.ASGITransport(app=fake.api_app)  # a tap: no /metrics here
    with pytest.raises(SweepError, match=r"no per-request metrics.*--metrics-url"):
        await run_sweep(config(url="http://tap.test"), transport=transport)


async def test_auto_through_a_tap_without_metrics_page_uses_per_request() -> None:
    fake = FakeSpecVllm()
    transport = httpx.ASGITransport(app=fake.api_app)
    result = await run_sweep(
        config(url="http://tap.test", temperatures=(1.0,)), transport=transport
    )
    assert acceptance(result.rows[0]).acceptance_rate == 0.3


async def test_counters_that_never_settle_are_flagged() -> None:
    fake = FakeSpecVllm(per_request_metrics=False, lag_scrapes=10_000)
    result = await sweep(fake, temperatures=(0.0,), settle_timeout=0.05)
    row = result.rows[0]
    assert row.counters_settled is False
    assert acceptance(row).verdict is Verdict.NOT_DRAFTING


async def test_progress_covers_every_request_and_the_settling() -> None:
    events: list[SweepProgress] = []
    fake = FakeSpecVllm(per_request_metrics=False, fail_at={1.0})
    await run_sweep(
        config(temperatures=(0.0, 1.0)), events.append, transport=httpx.ASGITransport(app=fake)
    )
    loads = [event for event in events if not event.settling]
    assert [event.done for event in loads] == list(range(1, 11))
    assert (loads[4].label, loads[4].errors, loads[-1].label, loads[-1].errors) == (
        "0.0",
        0,
        "1.0",
        5,
    )
    assert [(e.phase, e.label, e.done) for e in events if e.settling] == [
        (0, "0.0", 5),
        (1, "1.0", 10),
    ]

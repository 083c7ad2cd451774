"""The pure figures of a phase, on literal numbers: percentiles, pooled ratios, source choice,
counter sums and the settle rule."""

from __future__ import annotations

import pytest

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.verdict import Verdict
from specdec_exporter.devtools.load.counters import (
    counters_settled,
    expected_generation_tokens,
    model_totals,
)
from specdec_exporter.devtools.load.results import RequestResult, SpecDecoding
from specdec_exporter.devtools.sweep.phase import (
    choose_source,
    counter_acceptance,
    per_request_acceptance,
    phase_row,
)


def spec(steps: int, drafted: int, accepted: int) -> SpecDecoding:
    return SpecDecoding(
        num_spec_steps=steps, num_draft_tokens=drafted, num_accepted_draft_tokens=accepted
    )


def ok(
    spec_decoding: SpecDecoding | None = None, tokens: int = 10, from_usage: bool = True
) -> RequestResult:
    return RequestResult(
        index=0,
        temperature=0.4,
        stream=False,
        started=0.0,
        latency=0.5,
        output_tokens=tokens,
        tokens_from_usage=from_usage,
        spec=spec_decoding,
    )


def failed() -> RequestResult:
    return RequestResult(
        index=0,
        temperature=0.4,
        stream=False,
        started=0.0,
        latency=0.1,
        error="http_500",
        status=500,
    )


# Rates 0.9, 0.5 and 0.2 with different draft sizes, plus a request that drafted nothing.
PHASE = [ok(spec(5, 20, 18)), ok(spec(10, 40, 20)), ok(spec(2, 5, 1)), ok(spec(0, 0, 0)), failed()]


def test_per_request_figures_pool_sums_and_spread_rates() -> None:
    figures = per_request_acceptance(PHASE)
    assert figures.source == "per-request"
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (17, 65, 39)
    assert figures.acceptance_rate == 39 / 65  # pooled, not the mean of the rates (0.533)
    assert figures.mean_acceptance_length == 1 + 39 / 17
    # Sorted rates 0.2, 0.5, 0.9; linear interpolation between ranks.
    assert figures.rate_percentiles == pytest.approx((0.26, 0.5, 0.82))
    assert (figures.requests_with_metrics, figures.requests_not_drafting) == (4, 1)
    assert figures.verdict is Verdict.BORDERLINE


def test_a_request_that_drafted_nothing_is_counted_but_not_a_zero_rate() -> None:
    figures = per_request_acceptance([ok(spec(4, 16, 16)), ok(spec(0, 0, 0))])
    assert figures.rate_percentiles == (1.0, 1.0, 1.0)
    assert (figures.requests_with_metrics, figures.requests_not_drafting) == (2, 1)


def test_no_metrics_at_all_gives_no_figures_and_no_verdict() -> None:
    figures = per_request_acceptance([ok(), failed()])
    assert (figures.acceptance_rate, figures.mean_acceptance_length) == (None, None)
    assert figures.rate_percentiles == (None, None, None)
    assert (figures.spec_enabled, figures.verdict, figures.requests_with_metrics) == (None, None, 0)


def test_metrics_present_but_nothing_drafted_is_not_drafting() -> None:
    assert per_request_acceptance([ok(spec(0, 0, 0))]).verdict is Verdict.NOT_DRAFTING


def test_counter_figures_have_no_spread() -> None:
    figures = counter_acceptance(Totals(17.0, 65.0, 39.0, (20.0, 10.0, 6.0, 3.0), 56.0), True)
    assert figures.source == "counters"
    assert figures.acceptance_rate == 39 / 65
    assert figures.mean_acceptance_length == 1 + 39 / 17
    assert figures.rate_percentiles == (None, None, None)
    assert figures.requests_with_metrics is None
    assert figures.verdict is Verdict.BORDERLINE


@pytest.mark.parametrize(
    ("totals", "enabled", "expected"),
    [
        (Totals(10.0, 40.0, 30.0), True, Verdict.HEALTHY),
        (Totals(10.0, 40.0, 10.0), True, Verdict.BELOW_THRESHOLD),  # no c: no speedup
        (Totals(), True, Verdict.NOT_DRAFTING),
        (Totals(generation_tokens=50.0), False, Verdict.NOT_ENABLED),
    ],
)
def test_counter_verdicts(totals: Totals, enabled: bool, expected: Verdict) -> None:
    assert counter_acceptance(totals, enabled).verdict is expected


def test_auto_source_needs_metrics_on_every_successful_request() -> None:
    assert choose_source("auto", [ok(spec(1, 4, 2)), ok(spec(1, 4, 4)), failed()]) == (
        "per-request"
    )
    assert choose_source("auto", [ok(spec(1, 4, 2)), ok()]) == "counters"
    assert choose_source("auto", [failed(), failed()]) is None
    assert choose_source("counters", [ok(spec(1, 4, 2))]) == "counters"
    assert choose_source("per-request", [failed()]) == "per-request"


def test_model_totals_sum_engines_of_the_model_else_everything() -> None:
    totals = {
        ("m", "0"): Totals(1.0, 4.0, 3.0, (2.0, 1.0), 10.0),
        ("m", "1"): Totals(2.0, 8.0, 5.0, (2.0, 3.0), 20.0),
        ("other", "0"): Totals(100.0, 400.0, 300.0, (), 1000.0),
    }
    assert model_totals(totals, "m") == Totals(3.0, 12.0, 8.0, (4.0, 4.0), 30.0)
    assert model_totals(totals, "alias") == Totals(103.0, 412.0, 308.0, (4.0, 4.0), 1030.0)


def test_expected_generation_tokens_need_usage_on_every_success() -> None:
    assert expected_generation_tokens([ok(tokens=40), ok(tokens=35), failed()]) == 75
    assert expected_generation_tokens([ok(tokens=40), ok(tokens=3, from_usage=False)]) is None
    assert expected_generation_tokens([failed()]) == 0


@pytest.mark.parametrize(
    ("before", "previous", "current", "expected", "settled"),
    [
        (
            Totals(generation_tokens=100.0),
            Totals(5.0, generation_tokens=175.0),
            Totals(5.0, generation_tokens=175.0),
            75,
            True,
        ),
        # Still moving.
        (
            Totals(generation_tokens=100.0),
            Totals(4.0, generation_tokens=160.0),
            Totals(5.0, generation_tokens=175.0),
            75,
            False,
        ),
        # Two scrapes agree but the phase's last step is not in yet (vLLM records it late).
        (
            Totals(generation_tokens=100.0),
            Totals(4.0, generation_tokens=150.0),
            Totals(4.0, generation_tokens=150.0),
            75,
            False,
        ),
        # Unknown token count: agreement is all there is.
        (
            Totals(generation_tokens=100.0),
            Totals(4.0, generation_tokens=150.0),
            Totals(4.0, generation_tokens=150.0),
            None,
            True,
        ),
        # vLLM restarted during the phase: the counter starts again from 0.
        (
            Totals(generation_tokens=1000.0),
            Totals(5.0, generation_tokens=75.0),
            Totals(5.0, generation_tokens=75.0),
            75,
            True,
        ),
    ],
)
def test_counters_settled(
    before: Totals, previous: Totals, current: Totals, expected: int | None, settled: bool
) -> None:
    assert counters_settled(before, previous, current, expected) is settled


def test_phase_row_keeps_load_figures_and_drops_acceptance_without_success() -> None:
    row = phase_row("0.4", PHASE, 2.0, per_request_acceptance(PHASE))
    assert (row.label, row.load.requests, row.load.errors, row.succeeded) == ("0.4", 5, 1, 4)
    assert row.load.tokens_per_s == 40 / 2.0
    assert row.acceptance is not None
    empty = phase_row("1.0", [failed(), failed()], 1.0, counter_acceptance(Totals(), True))
    assert (empty.acceptance, empty.succeeded, empty.load.errors_by_kind) == (
        None,
        0,
        {"http_500": 2},
    )

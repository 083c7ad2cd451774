"""Percentiles and per-temperature aggregation, on literal numbers."""

from __future__ import annotations

import pytest

from specdec_exporter.devtools.load.results import RequestResult, SpecDecoding
from specdec_exporter.devtools.load.stats import SpecSummary, percentile, summarise


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 50, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([float(v) for v in range(1, 101)], 99, 99.01),
        ([10.0, 20.0], 99, 19.9),
    ],
)
def test_percentile_interpolates_linearly(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 50) is None


def ok(
    temperature: float | None,
    tokens: int,
    *,
    ttft: float | None = None,
    latency: float = 1.0,
    spec: SpecDecoding | None = None,
) -> RequestResult:
    return RequestResult(
        index=0,
        temperature=temperature,
        stream=ttft is not None,
        started=0.0,
        latency=latency,
        output_tokens=tokens,
        tokens_from_usage=True,
        ttft=ttft,
        spec=spec,
    )


def failed(temperature: float | None, kind: str) -> RequestResult:
    return RequestResult(
        index=0, temperature=temperature, stream=False, started=0.0, latency=0.5, error=kind
    )


def test_tpot_is_vllm_definition() -> None:
    assert ok(0.0, 11, ttft=0.1, latency=1.1).tpot == pytest.approx(0.1)
    assert ok(0.0, 1, ttft=0.1, latency=1.1).tpot is None
    assert ok(0.0, 11).tpot is None


def test_summary_rows_per_temperature_then_total() -> None:
    results = [
        ok(
            1.0,
            10,
            spec=SpecDecoding(num_spec_steps=4, num_draft_tokens=16, num_accepted_draft_tokens=4),
        ),
        ok(
            0.0,
            11,
            ttft=0.1,
            latency=1.1,
            spec=SpecDecoding(num_spec_steps=2, num_draft_tokens=8, num_accepted_draft_tokens=6),
        ),
        ok(0.0, 21, ttft=0.3, latency=4.3),
        failed(0.0, "http_500"),
        failed(None, "timeout"),
        failed(None, "http_500"),
        ok(None, 5),
    ]
    rows = summarise(results, elapsed=2.0)
    assert [row.label for row in rows] == ["0.0", "1.0", "default", "total"]
    zero, one, default, total = rows

    assert (zero.requests, zero.errors, zero.output_tokens) == (3, 1, 32)
    assert zero.tokens_per_s == 16.0
    assert (zero.ttft_p50, zero.ttft_p99) == pytest.approx((0.2, 0.298))
    assert (zero.tpot_p50, zero.tpot_p99) == pytest.approx((0.15, 0.199))
    assert zero.errors_by_kind == {"http_500": 1}
    assert zero.spec == SpecSummary(
        requests=1, num_spec_steps=2, num_draft_tokens=8, num_accepted_draft_tokens=6
    )
    assert zero.spec.acceptance_rate == 0.75
    assert zero.spec.mean_acceptance_length == 4.0

    assert one.spec is not None
    assert (one.spec.acceptance_rate, one.spec.mean_acceptance_length) == (0.25, 2.0)
    assert (one.ttft_p50, one.tpot_p50) == (None, None)

    assert (default.requests, default.errors, default.spec) == (3, 2, None)
    assert default.errors_by_kind == {"http_500": 1, "timeout": 1}

    assert (total.requests, total.errors, total.output_tokens, total.tokens_per_s) == (
        7,
        3,
        47,
        23.5,
    )
    assert total.errors_by_kind == {"http_500": 2, "timeout": 1}
    assert total.spec is not None
    assert total.spec.acceptance_rate == 10 / 24
    assert total.spec.mean_acceptance_length == 1 + 10 / 6


def test_no_drafts_is_not_zero_acceptance() -> None:
    spec = SpecSummary(
        requests=3, num_spec_steps=0, num_draft_tokens=0, num_accepted_draft_tokens=0
    )
    assert (spec.acceptance_rate, spec.mean_acceptance_length) == (None, None)


def test_failed_requests_add_no_tokens_or_spec() -> None:
    (row, total) = summarise([failed(0.7, "malformed")], elapsed=1.0)
    assert (row.label, row.output_tokens, row.spec, row.ttft_p50) == ("0.7", 0, None, None)
    assert total.errors == 1

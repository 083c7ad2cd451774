"""The request families: exact counts, pre-created series, bounded labels, histogram buckets."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.tap.spec import SpecDecodeSummary
from specdec_exporter.tap.stats import (
    ACCEPTANCE_RATE_BOUNDS,
    TPOT_BOUNDS,
    TTFT_BOUNDS,
    RequestRecord,
    RequestStats,
    acceptance_length_bounds,
)
from variants import V033

MODEL = "tiny-llama"
GREEDY_SPEC = SpecDecodeSummary(spec_steps=23, draft_tokens=92, accepted_tokens=73, spec_tokens=4)
HOT_SPEC = SpecDecodeSummary(spec_steps=46, draft_tokens=184, accepted_tokens=50, spec_tokens=4)


def stats_with(k: int | None = 4) -> tuple[RequestStats, CollectorRegistry]:
    stats = RequestStats(TemperatureBuckets(), lambda model: k if model == MODEL else None)
    registry = CollectorRegistry()
    stats.register(registry)
    return stats, registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_series_precreated_at_zero_for_every_bucket() -> None:
    stats, registry = stats_with()
    stats.add_model(MODEL)
    for bucket in ("0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+"):
        labels = {"model_name": MODEL, "temperature_bucket": bucket}
        assert value(registry, "specdec_requests_total", **labels, attributed="true") == 0
        assert value(registry, "specdec_requests_total", **labels, attributed="false") == 0
        assert value(registry, "specdec_request_draft_tokens_total", **labels) == 0
        assert value(registry, "specdec_request_acceptance_rate_count", **labels) == 0
        assert value(registry, "specdec_request_acceptance_length_bucket", **labels, le="5.0") == 0


def test_record_sums_exactly() -> None:
    stats, registry = stats_with()
    stats.record(RequestRecord(MODEL, "0", GREEDY_SPEC))
    stats.record(RequestRecord(MODEL, "0", GREEDY_SPEC))
    stats.record(RequestRecord(MODEL, "0.7-1.0", HOT_SPEC))
    stats.record(RequestRecord(MODEL, "0.7-1.0", None))
    greedy = {"model_name": MODEL, "temperature_bucket": "0"}
    hot = {"model_name": MODEL, "temperature_bucket": "0.7-1.0"}
    assert value(registry, "specdec_requests_total", **greedy, attributed="true") == 2
    assert value(registry, "specdec_request_drafts_total", **greedy) == 46
    assert value(registry, "specdec_request_draft_tokens_total", **greedy) == 184
    assert value(registry, "specdec_request_accepted_tokens_total", **greedy) == 146
    assert value(registry, "specdec_requests_total", **hot, attributed="true") == 1
    assert value(registry, "specdec_requests_total", **hot, attributed="false") == 1
    assert value(registry, "specdec_request_accepted_tokens_total", **hot) == 50
    assert stats.attributed_draft_tokens(MODEL) == 184 + 184
    assert stats.attributed_draft_tokens("nobody") == 0


def test_acceptance_histograms() -> None:
    stats, registry = stats_with()
    stats.record(RequestRecord(MODEL, "0", GREEDY_SPEC))  # rate 0.793, length 4.17
    labels = {"model_name": MODEL, "temperature_bucket": "0"}
    assert value(registry, "specdec_request_acceptance_rate_bucket", **labels, le="0.75") == 0
    assert value(registry, "specdec_request_acceptance_rate_bucket", **labels, le="0.8") == 1
    assert value(registry, "specdec_request_acceptance_rate_sum", **labels) == pytest.approx(
        73 / 92
    )
    assert value(registry, "specdec_request_acceptance_length_bucket", **labels, le="4.0") == 0
    assert value(registry, "specdec_request_acceptance_length_bucket", **labels, le="4.25") == 1
    assert value(registry, "specdec_request_acceptance_length_bucket", **labels, le="+Inf") == 1


def test_request_that_did_not_draft_is_counted_but_not_observed() -> None:
    stats, registry = stats_with()
    stats.record(RequestRecord(MODEL, "0", SpecDecodeSummary(0, 0, 0, 4)))
    labels = {"model_name": MODEL, "temperature_bucket": "0"}
    assert value(registry, "specdec_requests_total", **labels, attributed="true") == 1
    assert value(registry, "specdec_request_acceptance_rate_count", **labels) == 0
    assert value(registry, "specdec_request_acceptance_length_count", **labels) == 0


def test_bucket_bounds() -> None:
    assert ACCEPTANCE_RATE_BOUNDS[0] == 0.05 and ACCEPTANCE_RATE_BOUNDS[-1] == 1.0
    assert len(ACCEPTANCE_RATE_BOUNDS) == 20
    assert acceptance_length_bounds(2) == (1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0)


def test_unknown_k_waits_for_the_first_response() -> None:
    stats, registry = stats_with(k=None)
    stats.add_model("draftless")
    labels = {"model_name": "draftless", "temperature_bucket": "0"}
    assert value(registry, "specdec_request_acceptance_length_count", **labels) is None
    stats.record(RequestRecord("draftless", "0", SpecDecodeSummary(10, 20, 10, 2)))
    assert value(registry, "specdec_request_acceptance_length_bucket", **labels, le="3.0") == 1
    assert value(registry, "specdec_request_acceptance_length_bucket", **labels, le="2.0") == 1
    other = {"model_name": "draftless", "temperature_bucket": "1.0+"}
    assert value(registry, "specdec_request_acceptance_length_count", **other) == 0


def test_latency_histograms() -> None:
    stats, registry = stats_with()
    stats.record(
        RequestRecord(MODEL, "0", None, time_to_first_token=0.03, time_per_output_token=0.02)
    )
    labels = {"model_name": MODEL, "temperature_bucket": "0"}
    assert (
        value(registry, "specdec_request_time_to_first_token_seconds_bucket", **labels, le="0.04")
        == 1
    )
    assert (
        value(registry, "specdec_request_time_to_first_token_seconds_bucket", **labels, le="0.02")
        == 0
    )
    assert value(
        registry, "specdec_request_time_per_output_token_seconds_sum", **labels
    ) == pytest.approx(0.02)


def test_bucket_summary() -> None:
    stats, _ = stats_with()
    stats.record(RequestRecord(MODEL, "0", GREEDY_SPEC))
    stats.record(RequestRecord(MODEL, "invalid", None))
    rows = {(row.model_name, row.temperature_bucket): row for row in stats.bucket_summary()}
    assert len(rows) == 6  # five buckets pre-created, plus invalid on first use
    greedy = rows[(MODEL, "0")]
    assert (
        greedy.requests,
        greedy.attributed,
        greedy.drafts,
        greedy.draft_tokens,
        greedy.accepted_tokens,
    ) == (1, 1, 23, 92, 73)
    assert greedy.acceptance_rate == pytest.approx(73 / 92)
    assert greedy.mean_acceptance_length == pytest.approx(1 + 73 / 23)
    assert rows[(MODEL, "invalid")].requests == 1
    assert rows[(MODEL, "1.0+")].acceptance_rate is None


def test_exposition_is_valid_text_and_has_no_colons() -> None:
    stats, registry = stats_with()
    stats.record(RequestRecord(MODEL, "0", GREEDY_SPEC, 0.1, 0.01))
    text = generate_latest(registry).decode()
    assert "# TYPE specdec_requests_total counter" in text
    assert "# TYPE specdec_request_acceptance_length histogram" in text
    assert all(
        ":" not in line.split("{")[0] for line in text.splitlines() if not line.startswith("#")
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_exposition() -> None:
    stats, registry = stats_with()
    stats.record(RequestRecord(MODEL, "0", GREEDY_SPEC, 0.1, 0.01))
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=generate_latest(registry),
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_k_callback_does_not_break_a_scrape() -> None:
    def broken(_: str) -> int | None:
        raise RuntimeError("bug")

    stats = RequestStats(TemperatureBuckets(), broken)
    registry = CollectorRegistry()
    stats.register(registry)
    stats.record(RequestRecord(MODEL, "0", GREEDY_SPEC))  # k from the response: 4
    labels = {"model_name": MODEL, "temperature_bucket": "0"}
    assert value(registry, "specdec_request_acceptance_length_bucket", **labels, le="5.0") == 1
    assert generate_latest(registry)


@pytest.mark.parametrize(
    ("family", "bounds"),
    [
        ("time_to_first_token_seconds", TTFT_BOUNDS),
        ("request_time_per_output_token_seconds", TPOT_BOUNDS),
    ],
)
def test_ttft_and_tpot_buckets_are_vllms_own(family: str, bounds: tuple[float, ...]) -> None:
    """The tap's per-bucket TTFT and TPOT histograms compare with vLLM's only on vLLM's edges:
    read them from a real vLLM 0.33.0 capture."""
    capture = (V033 / "spec_ngram_k4.t8.prom").read_text()
    edges = re.findall(rf'^vllm:{family}_bucket{{[^}}]*le="([^"]+)"', capture, re.MULTILINE)
    finite = [float(edge) for edge in dict.fromkeys(edges) if edge != "+Inf"]
    assert tuple(finite) == bounds

"""Real vLLM: per-request spec-decode metrics add up to the `/metrics` counter deltas, exactly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from real_vllm.traffic import Phase, Request, run_phase, temperature_requests

pytestmark = pytest.mark.real_vllm

TEMPERATURES = (0.0, 0.4, 0.8, 1.0)
REQUESTS_PER_PHASE = 8


@pytest.fixture(scope="module")
def temperature_phases(real_vllm: Any) -> Iterator[dict[float, Phase]]:
    """One sequential phase per temperature (non-streaming and streaming requests alternate)."""
    with httpx.Client(base_url=real_vllm.url, timeout=120, trust_env=False) as client:
        yield {
            temperature: run_phase(
                client, f"T={temperature}", temperature_requests(temperature, REQUESTS_PER_PHASE)
            )
            for temperature in TEMPERATURES
        }


def describe(phase: Phase) -> str:
    return (
        f"{phase.name}: per-request sum {phase.per_request_sum}, "
        f"/metrics delta {phase.counter_delta}"
    )


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_per_request_sums_equal_counter_deltas(
    temperature_phases: dict[float, Phase], temperature: float
) -> None:
    phase = temperature_phases[temperature]
    assert phase.per_request_sum.drafts > 0, describe(phase)
    assert phase.per_request_sum == phase.counter_delta, describe(phase)


def test_generation_tokens_delta_equals_completion_tokens(
    temperature_phases: dict[float, Phase],
) -> None:
    for phase in temperature_phases.values():
        assert phase.before is not None and phase.after is not None
        delta = phase.after.generation_tokens - phase.before.generation_tokens
        assert delta == phase.completion_tokens, describe(phase)


def test_acceptance_falls_with_temperature(temperature_phases: dict[float, Phase]) -> None:
    rates = {t: phase.counter_delta.acceptance_rate for t, phase in temperature_phases.items()}
    shown = ", ".join(f"T={t}: {rate:.3f}" for t, rate in rates.items())
    assert rates[0.0] > rates[0.4] > rates[1.0], shown
    assert rates[0.8] < rates[0.4], shown
    assert rates[0.0] - rates[1.0] > 0.25, shown


def test_per_request_metrics_are_self_consistent(temperature_phases: dict[float, Phase]) -> None:
    for phase in temperature_phases.values():
        for outcome in phase.outcomes:
            spec, histogram = outcome.spec, outcome.histogram
            assert len(histogram) == 5
            assert sum(histogram) == spec.drafts
            assert sum(j * count for j, count in enumerate(histogram)) == spec.accepted_tokens
            assert spec.draft_tokens == 4 * spec.drafts


def test_concurrent_mixed_phase_sums_equal_counter_deltas(vllm: httpx.Client) -> None:
    requests = [
        Request(TEMPERATURES[index % 4], stream=index % 3 == 0, seed=100 + index)
        for index in range(REQUESTS_PER_PHASE)
    ]
    phase = run_phase(vllm, "concurrent, mixed temperatures", requests, concurrency=4)
    assert phase.per_request_sum.drafts > 0, describe(phase)
    assert phase.per_request_sum == phase.counter_delta, describe(phase)

"""The sweep against the vLLM simulator: acceptance falls with temperature, and the two sources
(per-request metrics, /metrics counter deltas) agree exactly with each other and the ground truth.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from specdec_exporter.devtools.sim import server as sim_server
from specdec_exporter.devtools.sim import settings as sim_settings
from specdec_exporter.devtools.sweep.config import SweepConfig
from specdec_exporter.devtools.sweep.phase import PhaseAcceptance, PhaseRow, per_request_acceptance
from specdec_exporter.devtools.sweep.runner import run_sweep

pytestmark = pytest.mark.anyio

TEMPERATURES = (0.0, 0.5, 1.0)


@pytest.fixture
def simulator_url() -> Iterator[str]:
    """A fresh simulator per test: its ground truth then covers this test's sweep only."""
    config = sim_settings.SimConfig(
        speculative=sim_settings.SpeculativeConfig("draft_model", 4),
        per_request_spec_decode_metrics="summary",
        seed=1,
    )
    with sim_server.running_simulator(config) as simulator:
        yield simulator.url


def sweep_config(url: str, **overrides: Any) -> SweepConfig:
    fields: dict[str, Any] = {
        "url": url,
        "temperatures": TEMPERATURES,
        "requests": 16,
        "concurrency": 2,
        "max_tokens": 32,
        "seed": 1,
    }
    fields.update(overrides)
    return SweepConfig(**fields)


def acceptance(row: PhaseRow) -> PhaseAcceptance:
    assert row.acceptance is not None
    return row.acceptance


def counts(figures: PhaseAcceptance) -> tuple[float, float, float]:
    return (figures.drafts, figures.draft_tokens, figures.accepted_tokens)


async def test_acceptance_falls_with_temperature(simulator_url: str) -> None:
    result = await run_sweep(sweep_config(simulator_url))
    assert result.source == "per-request"  # the simulator returns the metrics on every request
    rates = [acceptance(row).acceptance_rate for row in result.rows]
    assert all(rate is not None for rate in rates)
    greedy, warm, hot = (rate or 0.0 for rate in rates)
    assert greedy > warm > hot
    assert greedy > 0.55
    assert hot < 0.35
    low, _, high = acceptance(result.rows[0]).rate_percentiles
    assert low is not None and high is not None and low < high  # requests do differ


async def test_counters_equal_per_request_sums_and_the_ground_truth(simulator_url: str) -> None:
    result = await run_sweep(sweep_config(simulator_url, source="counters"))
    async with httpx.AsyncClient(base_url=simulator_url) as client:
        truth = (await client.get("/sim/ground-truth")).json()["by_temperature"]
    for row in result.rows:
        from_counters = acceptance(row)
        from_requests = per_request_acceptance(row.results)
        assert (from_counters.source, row.counters_settled) == ("counters", True)
        assert from_requests.requests_with_metrics == 16
        assert counts(from_counters) == counts(from_requests)
        assert from_counters.acceptance_rate == from_requests.acceptance_rate
        assert from_counters.mean_acceptance_length == from_requests.mean_acceptance_length
        expected = truth[row.label]
        assert counts(from_counters) == (
            expected["drafts"],
            expected["draft_tokens"],
            expected["accepted_tokens"],
        )

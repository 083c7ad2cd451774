"""Label cardinality stays bounded: capped models, expiry after vLLM stops showing them, no
per-model tap series for overlong names; the mirrored vLLM series stay exact."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from test_poller_collector import Clock, ScriptedSource

from fakevllm import fake_vllm
from sidecar_process import sidecar
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.core.model import DraftCost
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.poller import Poller, PollState
from specdec_exporter.sidecar.scraper import ScrapeError
from specdec_exporter.tap.stats import RequestStats
from variants import MODEL, capture, with_models

COST = DraftCost(0.1, "method", "ngram")

pytestmark = pytest.mark.anyio
LONG_NAME = "x" * 100_000


def flood(models: int, *, long_name: bool = False) -> str:
    """t3 plus `models` more model names (each with every spec series), and one 100 KB name."""
    names = [f"m{index:04d}" for index in range(models)] + ([LONG_NAME] if long_name else [])
    return with_models(capture("t3"), names)


def series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def tap_models(text: str) -> set[str]:
    return {
        line.split('model_name="', 1)[1].split('"', 1)[0]
        for line in series(text)
        if line.startswith("specdec_request")
    }


class Harness:
    """The poller, the collector and the tap's stats wired as `run` wires them."""

    def __init__(self, bodies: list[str | ScrapeError], **limits: float) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.stats = RequestStats(TemperatureBuckets((0.5, 0.7, 1.0)), lambda model: 4)
        self.stats.register(self.registry)
        self.clock = Clock()
        self.poller = Poller(
            ScriptedSource(bodies),
            interval=5,
            window=60,
            cost=COST,
            log_interval=60,
            clock=self.clock,
            tap_counts=self.tap_counts,
            **limits,
        )  # type: ignore[arg-type]
        self.registry.register(
            SpecDecodeCollector(
                self.poller.state,
                cost=COST,
                method="ngram",
                interval=5,
                window=60,
                coverage_enabled=True,
            )
        )

    def tap_counts(self, _state: PollState) -> dict[tuple[str, str], Totals]:
        served = self.poller.state.models_seen
        self.stats.retain_models(served | {"other"})
        for model in served:
            self.stats.add_model(model)
        return {}

    async def polls(self, count: int) -> str:
        for _ in range(count):
            await self.poller.poll_once()
            self.clock.now += 5
        return generate_latest(self.registry).decode()


async def test_models_are_capped_and_expire_after_the_configured_successful_polls() -> None:
    timeout = ScrapeError("timeout", "slow")
    bodies: list[str | ScrapeError] = [
        capture("t3"),
        flood(100),
        *[capture("t3")] * 11,
        *[timeout] * 30,
        capture("t3"),
    ]
    harness = Harness(bodies, max_models=8, model_expiry=60.0)  # 60 s / 5 s: 12 polls
    baseline = await harness.polls(1)
    flooded = await harness.polls(1)
    assert tap_models(flooded) == {MODEL, *(f"m{index:04d}" for index in range(7))}
    assert harness.poller.state.models_dropped == {"cap": 93, "name_too_long": 0}
    # vLLM's 8 series mirrored, plus enabled, k, break-even, speculative info; none of the tap's
    assert sum('model_name="m0099"' in line for line in series(flooded)) == 8 + 4
    await harness.polls(11 + 30)  # 11 successful polls without them, then 30 failed ones
    assert len(harness.poller.state.models_seen) == 8
    recovered = await harness.polls(1)  # the 12th successful poll without them
    assert harness.poller.state.models_seen == {MODEL}
    assert len(series(recovered)) == len(series(baseline))
    assert tap_models(recovered) == {MODEL}
    dropped = 'specdec_models_dropped_total{reason="cap"} 93.0'
    assert dropped in recovered


async def test_a_refused_name_is_counted_once_while_it_stays_and_again_when_it_returns() -> None:
    bodies: list[str | ScrapeError] = [capture("t3"), flood(2), flood(2), capture("t3"), flood(2)]
    harness = Harness(bodies, max_models=2, model_expiry=600.0)
    await harness.polls(5)
    assert harness.poller.state.models_seen == {MODEL, "m0000"}
    assert harness.poller.state.models_dropped == {"cap": 2, "name_too_long": 0}  # m0001 twice


async def test_an_overlong_name_gets_no_tap_series_but_its_vllm_series() -> None:
    harness = Harness([flood(0, long_name=True)], max_models=64, model_expiry=600.0)
    text = await harness.polls(1)
    assert tap_models(text) == {MODEL}
    assert harness.poller.state.models_dropped == {"cap": 0, "name_too_long": 1}
    assert sum(LONG_NAME in line for line in series(text)) == 8 + 4
    assert f'specdec_drafts_total{{engine="0",model_name="{LONG_NAME}"}} 10.0' in text


def wait_until(check: Callable[[], str | None], timeout: float = 60) -> str:
    """Poll `check` until it returns text (no sleeping on a guess)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError("condition never met")


def test_run_returns_to_normal_cardinality_once_vllm_does() -> None:
    # A poll of the flood costs ~0.3 s of CPU: poll every second, expire after 3 polls.
    with (
        fake_vllm(capture("t3")) as vllm,
        sidecar(
            vllm.url, "--proxy-listen", "127.0.0.1:0", "--interval", "1", "--model-expiry", "3"
        ) as (url, _),
    ):

        def metrics() -> str:
            return httpx.get(url + "/metrics", timeout=30).text

        def metrics_when(ready: Callable[[str], bool]) -> Callable[[], str | None]:
            def check() -> str | None:
                text = metrics()
                return text if ready(text) else None

            return check

        baseline = wait_until(metrics_when(lambda text: tap_models(text) == {MODEL}))
        vllm.serve(flood(2000, long_name=True))
        flooded = wait_until(
            metrics_when(lambda text: 'specdec_models_dropped_total{reason="cap"} 1937.0' in text)
        )
        assert len(tap_models(flooded)) == 64
        assert 'specdec_models_dropped_total{reason="name_too_long"} 1.0' in flooded
        assert sum(LONG_NAME in line for line in series(flooded)) == 8 + 4
        vllm.serve(capture("t3"))
        recovered = wait_until(metrics_when(lambda text: tap_models(text) == {MODEL}))
        assert len(series(recovered)) == len(series(baseline))

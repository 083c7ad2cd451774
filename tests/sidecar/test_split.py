"""Where the temperature split comes from when the probe, the tap, both or neither are on: nothing
is counted twice; the probe's batch buckets over the sidecar's window."""

from __future__ import annotations

from typing import get_args

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from test_poller_collector import COST, Clock, ScriptedSource

from probe_text import probe_text
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.buckets import TEMPERATURE_BUCKETS_ENV
from specdec_exporter.core.report import BucketKey
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.split import SPLIT_SOURCES, SplitSource
from specdec_exporter.sidecar.split_collector import SplitCollector
from variants import MODEL, capture

pytestmark = pytest.mark.anyio


class FakeTap(Collector):
    """The tap's counters: one family, and the cumulative counts the poller reads."""

    def __init__(self) -> None:
        self.counts: dict[BucketKey, Totals] = {(MODEL, "0"): Totals(5, 20, 10)}

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "specdec_request_drafts", "tap", labels=["model_name", "temperature_bucket"]
        )
        for (model, bucket), totals in self.counts.items():
            family.add_metric([model, bucket], totals.drafts)
        return [family]


class Sidecar:
    def __init__(self, bodies: list[str], *, tap: FakeTap | None) -> None:
        self.clock = Clock()
        self.poller = Poller(
            ScriptedSource(bodies),
            interval=5,
            window=3600,
            cost=COST,
            log_interval=60,
            clock=self.clock,
            tap_counts=(lambda _state: dict(tap.counts)) if tap else None,
            tap_families=tap.collect if tap else None,
        )
        self.registry = CollectorRegistry(auto_describe=False)
        state = self.poller.state
        self.registry.register(
            SpecDecodeCollector(state, cost=COST, method=None, interval=5, window=3600)
        )
        self.registry.register(SplitCollector(state))

    async def poll(self, times: int = 1) -> None:
        for _ in range(times):
            await self.poller.poll_once()
            self.clock.now += 5

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def source(self) -> SplitSource:
        return self.poller.state.temperature_split_source


def drafts_samples(sidecar: Sidecar) -> list[str]:
    text = generate_latest(sidecar.registry).decode()
    return [line for line in text.splitlines() if line.startswith("specdec_request_drafts_total")]


async def test_with_probe_and_tap_the_probe_feeds_the_split_and_the_tap_is_withheld() -> None:
    tap = FakeTap()
    bodies = [capture("t0") + probe_text(), capture("t1") + probe_text(rounds=3)]
    sidecar = Sidecar(bodies, tap=tap)
    await sidecar.poll(2)
    assert sidecar.source() == "probe"
    assert sidecar.value("specdec_temperature_split_info", source="probe") == 1.0
    # one family, one source: the probe's count for the greedy bucket, never the tap's 5
    assert drafts_samples(sidecar) == [
        f'specdec_request_drafts_total{{model_name="{MODEL}",temperature_bucket="{bucket}"}} '
        f"{value}"
        for bucket, value in (
            ("0", "60.0"),
            ("0-0.5", "0.0"),
            ("0.5-0.7", "0.0"),
            ("0.7-1.0", "30.0"),
            ("1.0+", "0.0"),
        )
    ]
    greedy = sidecar.poller.state.buckets[(MODEL, "0")]
    assert (greedy.drafts, greedy.draft_tokens, greedy.accepted_tokens) == (40, 160, 126)
    # coverage: the probe's 240 draft tokens over two rounds / vLLM's t0 -> t1 delta
    vllm_tokens = 9448.0
    assert sidecar.value("specdec_request_coverage_ratio", model_name=MODEL) == 240 / vllm_tokens


def greedy_drafts(sidecar: Sidecar) -> float | None:
    return sidecar.value("specdec_request_drafts_total", model_name=MODEL, temperature_bucket="0")


async def test_when_the_probe_goes_the_tap_counts_on_from_the_last_poll_that_saw_it() -> None:
    """Requests that pass the tap between a vLLM restart without the probe and the next poll are
    counted once: the tap is never reset (it used to be, which erased them)."""
    tap = FakeTap()
    bodies = [capture("t0") + probe_text(), capture("t1"), capture("t2")]
    sidecar = Sidecar(bodies, tap=tap)
    await sidecar.poll()
    assert sidecar.source() == "probe"
    probe_drafts = greedy_drafts(sidecar)
    assert probe_drafts == 20.0
    tap.counts = {(MODEL, "0"): Totals(7, 28, 14)}  # 2 drafts through the tap since that poll
    await sidecar.poll()  # vLLM restarted without the probe: at once, no hysteresis
    assert sidecar.source() == "tap"
    assert sidecar.value("specdec_temperature_split_info", source="tap") == 1.0
    assert greedy_drafts(sidecar) == probe_drafts + 2  # continuous, the 2 not lost
    assert sidecar.poller.state.buckets[(MODEL, "0")].drafts == 2
    tap.counts = {(MODEL, "0"): Totals(9, 36, 18)}
    await sidecar.poll()
    assert greedy_drafts(sidecar) == probe_drafts + 4
    assert sidecar.poller.state.buckets[(MODEL, "0")].drafts == 4


async def test_a_probe_with_its_split_off_leaves_the_split_to_the_tap() -> None:
    tap = FakeTap()
    sidecar = Sidecar([capture("t1") + probe_text(temperature_split=False)], tap=tap)
    await sidecar.poll()
    assert sidecar.source() == "tap" and drafts_samples(sidecar) == [
        f'specdec_request_drafts_total{{model_name="{MODEL}",temperature_bucket="0"}} 5.0'
    ]
    assert (
        sidecar.value(
            "specdec_batch_drafts_total", model_name=MODEL, engine="0", batch_bucket="2-4"
        )
        == 3.0
    )  # the batch split stays on


async def test_neither_probe_nor_tap_says_none_and_exports_no_split() -> None:
    sidecar = Sidecar([capture("t0"), capture("t1")], tap=None)
    await sidecar.poll(2)
    assert sidecar.source() == "none"
    assert sidecar.value("specdec_temperature_split_info", source="none") == 1.0
    assert drafts_samples(sidecar) == []
    assert sidecar.value("specdec_request_coverage_ratio", model_name=MODEL) is None
    assert sidecar.poller.state.batch_buckets == []


async def test_the_probe_alone_gives_the_split_and_batch_buckets_over_the_window() -> None:
    bodies = [capture("t0") + probe_text(), capture("t1") + probe_text(rounds=3)]
    sidecar = Sidecar(bodies, tap=None)
    await sidecar.poll(2)
    assert sidecar.source() == "probe"
    rows = {row.batch_bucket: row for row in sidecar.poller.state.batch_buckets}
    assert list(rows) == ["1", "2-4", "5-8", "9-16", "17-32", "33-64", "65+"]
    small = rows["2-4"]
    assert (small.steps, small.entry.drafts, small.entry.accepted_tokens) == (2, 6, 12)
    assert small.entry.acceptance_rate == 0.5 and small.entry.mean_acceptance_length == 3.0
    assert rows["5-8"].entry.verdict == "not drafting"


async def test_the_source_is_kept_while_vllm_is_unreachable() -> None:
    from specdec_exporter.sidecar.scraper import ScrapeError  # noqa: PLC0415

    sidecar = Sidecar([capture("t0") + probe_text(), ScrapeError("timeout", "slow")], tap=None)  # type: ignore[list-item]
    await sidecar.poll(2)
    assert sidecar.source() == "probe"
    assert sidecar.value("specdec_temperature_split_info", source="probe") == 1.0
    assert drafts_samples(sidecar) == [] and sidecar.poller.state.batch_buckets == []


def test_the_sources_are_the_documented_three() -> None:
    assert SPLIT_SOURCES == get_args(SplitSource) == ("probe", "tap", "none")


def test_the_sidecar_reads_the_temperature_edges_from_the_probes_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One source for both: the env var the probe reads inside vLLM sets the sidecar's edges."""
    monkeypatch.setenv(TEMPERATURE_BUCKETS_ENV, "0.3,0.9")
    assert Settings().temperature_buckets == (0.3, 0.9)
    prefix = Settings.model_config.get("env_prefix", "")
    assert f"{prefix}temperature_buckets".upper() == TEMPERATURE_BUCKETS_ENV


def test_the_taps_reset_zeroes_every_count() -> None:
    from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.core.request_metrics import SpecDecodeSummary  # noqa: PLC0415
    from specdec_exporter.tap.stats import RequestRecord, RequestStats  # noqa: PLC0415

    stats = RequestStats(TemperatureBuckets(), lambda model: 4)
    stats.record(RequestRecord(MODEL, "0", SpecDecodeSummary(2, 8, 4, 4)))
    assert [
        row.draft_tokens for row in stats.bucket_summary() if row.temperature_bucket == "0"
    ] == [8]
    stats.reset()
    assert stats.bucket_summary() == []


async def test_the_probes_health_is_mirrored_as_the_last_successful_poll_saw_it() -> None:
    """specdec_engine_probe_info and specdec_engine_probe_errors_total: what vLLM's
    specdec_probe_info and specdec_probe_errors_total say (errors summed over API servers), under
    the sidecar's job, where SpecDecodeProbeSplitOff and SpecDecodeProbeErrors look; kept as last
    seen while vLLM is unreachable, gone once vLLM answers without a probe."""
    from specdec_exporter import __version__  # noqa: PLC0415
    from specdec_exporter.devtools.sim.probe import SPLIT_OFF_WITHOUT_METRICS  # noqa: PLC0415
    from specdec_exporter.sidecar.scraper import ScrapeError  # noqa: PLC0415

    errors = 'specdec_probe_errors_total{hook="finished",pid="9"} 4.0\n'
    bodies = [
        capture("t0") + probe_text(temperature_split=False) + errors,
        ScrapeError("timeout", "slow"),
        capture("t1"),
    ]
    sidecar = Sidecar(bodies, tap=None)  # type: ignore[arg-type]
    await sidecar.poll()
    info = {
        "version": __version__,
        "vllm_version": "0.33.0",
        "temperature_split": "off",
        "batch_split": "on",
        "reason": SPLIT_OFF_WITHOUT_METRICS,
    }
    assert sidecar.value("specdec_engine_probe_info", **info) == 1.0
    assert sidecar.value("specdec_engine_probe_errors_total", hook="finished") == 4.0
    assert sidecar.value("specdec_engine_probe_errors_total", hook="record") == 0.0
    await sidecar.poll()  # vLLM unreachable: the last seen, so the alert's clock runs on
    assert sidecar.value("specdec_engine_probe_info", **info) == 1.0
    assert sidecar.value("specdec_engine_probe_errors_total", hook="finished") == 4.0
    await sidecar.poll()  # vLLM back, without the probe
    text = generate_latest(sidecar.registry).decode()
    assert "specdec_engine_probe" not in text


async def test_the_report_carries_the_probe_as_the_last_poll_saw_it() -> None:
    from specdec_exporter.sidecar.app import probe_json  # noqa: PLC0415

    sidecar = Sidecar([capture("t0") + probe_text(temperature_split=False)], tap=None)
    await sidecar.poll()
    probe = probe_json(sidecar.poller.state.probe.info)
    assert probe is not None
    assert (probe["temperature_split"], probe["batch_split"]) == ("off", "on")
    assert probe_json(None) is None


async def test_a_flapping_probe_info_series_adds_no_phantom_requests() -> None:
    """The probe's info flaps on, on, off, off, ... while its counts stand still, a tap on: the
    exported specdec_requests_total used to go 3, 3, 0, 0, 3, ... (increase() = 12 here, 40 in
    the issue's attack); it stays at 3 and the split stays with the probe."""
    on = capture("t3") + probe_text()
    off = on.replace('temperature_split="on"', 'temperature_split="off"')
    assert off != on
    sidecar = Sidecar([on, on, off, off] * 5, tap=FakeTap())
    seen = []
    for _ in range(20):
        await sidecar.poll()
        seen.append(
            sum(
                sidecar.value(
                    "specdec_requests_total",
                    model_name=MODEL,
                    temperature_bucket=bucket,
                    attributed=attributed,
                )
                or 0.0
                for bucket in ("0", "0.7-1.0")
                for attributed in ("true", "false")
            )
        )
        assert sidecar.source() == "probe"
    assert seen == [3.0] * 20

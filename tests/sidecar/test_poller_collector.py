"""Poller + collector: fixture snapshots in, the exporter's exposition out (golden file)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from probe_text import probe_text
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import parse
from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.core.report import BucketKey
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.scraper import ProbeFilesFailure, Scrape, ScrapeError
from specdec_exporter.sidecar.split_collector import SplitCollector
from variants import FIXTURES, MODEL, capture, with_engines

pytestmark = pytest.mark.anyio
GOLDEN = Path(__file__).parent.parent / "golden"


class ScriptedSource:
    """Returns the given bodies in turn; a ScrapeError in the list is raised instead. With
    ``files_failures``, each scrape says in turn why the probe's files could not be read."""

    def __init__(
        self,
        bodies: Iterable[str | ScrapeError],
        files_failures: Iterable[ProbeFilesFailure | None] = (),
    ) -> None:
        self._bodies = list(bodies)
        self._files_failures = list(files_failures)

    async def scrape(self) -> Scrape:
        body = self._bodies.pop(0)
        failure = self._files_failures.pop(0) if self._files_failures else None
        if isinstance(body, ScrapeError):
            raise body
        return Scrape(parse(body), 0.0125, parse_probe(body), probe_files_failure=failure)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


COST = DraftCost(0.1, "method", "ngram")


async def poll_all(
    bodies: list[str | ScrapeError],
    *,
    window: float = 3600,
    tap_counts: dict[BucketKey, Totals] | None = None,
    interval: float = 5,
    cost: DraftCost = COST,
    probe_files: bool = False,
    files_failures: Iterable[ProbeFilesFailure | None] = (),
) -> tuple[Poller, CollectorRegistry]:
    clock = Clock()
    poller = Poller(
        ScriptedSource(bodies, files_failures),
        interval=interval,
        window=window,
        cost=cost,
        log_interval=60,
        clock=clock,
        tap_counts=(lambda _state: dict(tap_counts)) if tap_counts is not None else None,
        probe_files=probe_files,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SpecDecodeCollector(
            poller.state,
            cost=cost,
            method="ngram",
            interval=interval,
            window=window,
            coverage_enabled=tap_counts is not None,
            restarts=dict.fromkeys(("poller", "metrics_server", "tap"), 0),
        )
    )
    registry.register(SplitCollector(poller.state))
    for _ in bodies:
        await poller.poll_once()
        clock.now += interval
    return poller, registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


async def test_counters_mirror_vllm_exactly() -> None:
    _, registry = await poll_all([capture("t0"), capture("t3")])
    labels = {"model_name": MODEL, "engine": "0"}
    assert value(registry, "specdec_drafts_total", **labels) == 7380.0
    assert value(registry, "specdec_draft_tokens_total", **labels) == 29520.0
    assert value(registry, "specdec_accepted_tokens_total", **labels) == 23194.0
    assert (
        value(registry, "specdec_accepted_tokens_per_position_total", position="3", **labels)
        == 4981.0
    )
    assert value(registry, "specdec_generation_tokens_total", **labels) == 31030.0
    assert value(registry, "specdec_num_speculative_tokens", model_name=MODEL) == 4.0
    assert value(registry, "specdec_spec_decode_enabled", model_name=MODEL) == 1.0
    assert value(registry, "specdec_up") == 1.0


async def test_modelled_speedup_over_the_window() -> None:
    _poller, registry = await poll_all([capture("t0"), capture("t1")])
    # Interval t1 of the ground truth: 2362 drafts, 7434 accepted -> L = 1 + 7434/2362.
    assert value(registry, "specdec_estimated_speedup", model_name=MODEL) == (
        (1 + 7434 / 2362) / (1 + 4 * 0.1)
    )
    # In the exported unit (accepted / draft tokens): 9448 draft tokens in 2362 drafts of 4,
    # so the speedup is 1 at a = k*c / 4 = c.
    break_even = value(registry, "specdec_break_even_acceptance_rate", model_name=MODEL)
    assert break_even == pytest.approx(0.1, abs=1e-15)
    assert value(registry, "specdec_draft_cost_ratio", source="method") == 0.1
    assert value(registry, "specdec_speculative_info", model_name=MODEL, method="ngram") == 1.0


async def test_failure_drops_vllm_figures_counts_reason_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    failures: list[str | ScrapeError] = [ScrapeError("timeout", "slow")] * 3
    poller, registry = await poll_all([capture("t1"), *failures])
    assert value(registry, "specdec_up") == 0.0
    assert value(registry, "specdec_vllm_ever_up") == 1.0  # went down, not still starting
    assert value(registry, "specdec_scrape_failures_total", reason="timeout") == 3.0
    assert value(registry, "specdec_scrape_failures_total", reason="connect") == 0.0
    assert value(registry, "specdec_drafts_total", model_name=MODEL, engine="0") is None
    warnings = [r for r in caplog.records if r.getMessage() == "vLLM scrape failed"]
    assert len(warnings) == 1  # rate-limited: one line per log interval
    source = ScriptedSource([capture("t2")])
    poller._scraper = source  # vLLM comes back
    await poller.poll_once()
    assert value(registry, "specdec_up") == 1.0
    assert value(registry, "specdec_drafts_total", model_name=MODEL, engine="0") == 4796.0


async def test_probe_files_read_failures_are_counted_by_reason_from_the_start() -> None:
    """With --probe-dir, a poll whose read of the probe's files failed is counted (the poll
    itself succeeded: vLLM is up); the counter is there, at 0, before the first failure, so a
    rate() sees the first one. Without --probe-dir there is no such family."""
    name = "specdec_probe_files_read_failures_total"
    _, before = await poll_all([], probe_files=True)
    assert value(before, name, reason="timeout") == 0.0
    script: list[ProbeFilesFailure | None] = [None, "timeout", "error", "error", None]
    _, registry = await poll_all([capture("t1")] * 5, probe_files=True, files_failures=script)
    assert value(registry, name, reason="timeout") == 1.0
    assert value(registry, name, reason="error") == 2.0
    assert value(registry, "specdec_up") == 1.0
    assert value(registry, "specdec_scrape_failures_total", reason="internal") == 0.0
    _, without = await poll_all([capture("t1")])
    assert value(without, name, reason="timeout") is None


async def test_before_the_first_success_vllm_is_still_starting() -> None:
    failures: list[str | ScrapeError] = [ScrapeError("connect", "refused")] * 2
    _, registry = await poll_all([*failures])
    assert (value(registry, "specdec_up"), value(registry, "specdec_vllm_ever_up")) == (0.0, 0.0)
    assert value(registry, "specdec_draft_cost_ratio", source="method") == 0.1
    assert value(registry, "specdec_speculative_info", model_name=MODEL, method="ngram") is None


async def test_vllm_restart_keeps_window_figures_positive() -> None:
    restarted = capture("t1")  # after t3, counters go back to t1's lower values: a reset
    poller, _ = await poll_all([capture("t2"), capture("t3"), restarted])
    aggregate = poller.state.report[-1]
    assert aggregate.drafts == (7380 - 4796) + 2362  # t2->t3, then everything since restart


async def test_spec_off_exports_enabled_zero_and_no_counters() -> None:
    nospec = (FIXTURES / "vllm-0.33.0/nospec.t1.prom").read_text()
    _, registry = await poll_all([nospec, nospec])
    assert value(registry, "specdec_spec_decode_enabled", model_name=MODEL) == 0.0
    assert value(registry, "specdec_drafts_total", model_name=MODEL, engine="0") is None
    assert (
        value(registry, "specdec_generation_tokens_total", model_name=MODEL, engine="0") == 6141.0
    )


async def test_legacy_v0_exports_its_own_gauges_only() -> None:
    v0 = (FIXTURES / "vllm-0.7.3/v0_spec_ngram_k4.t3.prom").read_text()
    _, registry = await poll_all([v0])
    assert (
        value(registry, "specdec_legacy_v0_draft_acceptance_rate", model_name=MODEL)
        == 0.7976538461538462
    )
    assert value(registry, "specdec_draft_tokens_total", model_name=MODEL, engine="0") is None


async def test_coverage_ratio_is_tap_share_of_vllm_draft_tokens() -> None:
    tap: dict[BucketKey, Totals] = {(MODEL, "0"): Totals()}
    clock = Clock()
    poller = Poller(
        ScriptedSource([capture("t1"), capture("t2")]),
        interval=5,
        window=60,
        cost=COST,
        log_interval=60,
        clock=clock,
        tap_counts=lambda _state: tap,
    )
    await poller.poll_once()
    clock.now += 5
    # interval t2 has 9736 draft tokens in vLLM; the tap attributed 4868 over two buckets, one of
    # them born since the first poll (the tap's counters start at zero, so it counts whole)
    tap.update(
        {(MODEL, "0"): Totals(draft_tokens=3000.0), (MODEL, "invalid"): Totals(draft_tokens=1868.0)}
    )
    await poller.poll_once()
    assert poller.state.coverage == {MODEL: 0.5}


async def test_bucket_figures_cover_the_sidecar_window_not_since_start() -> None:
    """A bucket that was good for a long time and then degraded reads its window, not its past."""
    tap: dict[BucketKey, Totals] = {}
    clock = Clock()
    poller = Poller(
        ScriptedSource([capture("t0"), capture("t1"), capture("t2"), capture("t3")]),
        interval=5,
        window=10,
        cost=COST,
        log_interval=60,
        clock=clock,
        tap_counts=lambda _state: tap,
    )
    for drafts, draft_tokens, accepted in [
        (0, 0, 0),
        (1000, 4000, 3600),
        (1100, 4400, 3640),
        (1200, 4800, 3680),
    ]:
        tap[(MODEL, "0")] = Totals(drafts, draft_tokens, accepted)
        await poller.poll_once()
        clock.now += 5
    ((key, bucket),) = poller.state.buckets.items()
    assert key == (MODEL, "0")
    assert bucket.engine == "all"
    # window = last two intervals: 200 drafts, 800 draft tokens, 80 accepted (since start: 0.767)
    assert (bucket.drafts, bucket.draft_tokens, bucket.accepted_tokens) == (200, 800, 80)
    assert bucket.acceptance_rate == 0.1
    assert bucket.mean_acceptance_length == 1.4
    assert bucket.drafts_per_second == 20.0
    assert bucket.estimated_speedup == pytest.approx(1.4 / 1.4)
    assert bucket.verdict == "below threshold"  # 0.1 < t = 0.5, but the modelled speedup is 1.0


async def test_history_keeps_one_point_per_poll_and_a_gap_for_a_failed_poll() -> None:
    tap: dict[BucketKey, Totals] = {}
    clock = Clock()
    failure = ScrapeError("connect", "refused")
    poller = Poller(
        ScriptedSource([capture("t0"), capture("t1"), failure, capture("t2")]),
        interval=5,
        window=60,
        cost=COST,
        log_interval=60,
        clock=clock,
        tap_counts=lambda _state: tap,
    )
    for counts in (Totals(), Totals(100, 400, 300), Totals(100, 400, 300), Totals(200, 800, 500)):
        tap[(MODEL, "0")] = counts
        await poller.poll_once()
        clock.now += 5
    lines = {(s.model_name, s.temperature_bucket): s.points for s in poller.state.history.series()}
    model = lines[(MODEL, None)]
    assert [age for age, _ in model] == [15.0, 10.0, 5.0, 0.0]
    assert [value is None for _, value in model] == [True, False, True, False]
    assert model[1][1] == 7434 / 9448  # t0 -> t1 in vLLM's counters
    # the tap's bucket: no window at the first poll, 300 / 400, a gap, then 500 / 800 (t0..t2)
    assert [value for _, value in lines[(MODEL, "0")]] == [None, 0.75, None, 0.625]


async def test_golden_exposition(update_golden: bool) -> None:
    """Two engines, the engine probe on (so it feeds the split though a tap is on too)."""
    _, registry = await poll_all(
        [capture("t0"), with_engines(capture("t3"), 2) + probe_text()],
        tap_counts={(MODEL, "0"): Totals()},
    )
    text = generate_latest(registry).decode()
    golden = GOLDEN / "exporter_two_engines.prom"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text(), "rerun with --update-golden if the change is intended"


def test_golden_passes_promtool_check_metrics() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool missing in CI (apt-get install prometheus)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    golden = (GOLDEN / "exporter_two_engines.prom").read_bytes()
    result = subprocess.run(
        [promtool, "check", "metrics"], input=golden, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode() + result.stdout.decode()


class BrokenSource:
    """A scraper with a bug: every poll raises something that is not a ScrapeError."""

    async def scrape(self) -> Scrape:
        raise RuntimeError("bug")


async def test_internal_errors_are_rate_limited_and_keep_their_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    poller = Poller(
        BrokenSource(), interval=5, window=60, cost=COST, log_interval=60, clock=Clock()
    )
    for _ in range(5):
        await poller.poll_once()
    errors = [r for r in caplog.records if r.getMessage() == "unexpected error while polling vLLM"]
    assert len(errors) == 1
    assert errors[0].exc_info is not None and errors[0].exc_info[0] is RuntimeError
    assert poller.state.failures["internal"] == 5


def with_accepted(text: str, value: str) -> str:
    line = f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{MODEL}"}} '
    start = text.index(line) + len(line)
    return text[:start] + value + text[text.index("\n", start) :]


@pytest.mark.parametrize("written", ["NaN", "+Inf", "-3.0", "4.2e13"])
async def test_an_invalid_series_is_dropped_counted_and_logged_once(
    written: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    bad = with_accepted(capture("t2"), written)
    poller, registry = await poll_all([capture("t1"), bad, bad, bad])
    reason = {"NaN": "nan", "+Inf": "infinite", "-3.0": "negative"}.get(
        written, "accepted_over_drafted"
    )
    assert value(registry, "specdec_up") == 1.0
    assert value(registry, "specdec_invalid_series_total", reason=reason) == 3.0
    others = [r for r in ("nan", "infinite", "negative", "accepted_over_drafted") if r != reason]
    assert [value(registry, "specdec_invalid_series_total", reason=r) for r in others] == [0.0] * 3
    for family in ("specdec_drafts_total", "specdec_accepted_tokens_total"):
        assert value(registry, family, model_name=MODEL, engine="0") is None
    assert value(registry, "specdec_estimated_speedup", model_name=MODEL) is None
    assert value(registry, "specdec_num_speculative_tokens", model_name=MODEL) is None
    assert (
        value(registry, "specdec_generation_tokens_total", model_name=MODEL, engine="0") == 20207.0
    )
    logged = [r for r in caplog.records if r.getMessage().startswith("vLLM exposed series")]
    assert len(logged) == 1
    assert poller.state.up


async def test_no_help_text_depends_on_a_setting() -> None:
    """Two pods with another window, interval and c: every HELP line is the same (Prometheus and
    Thanos keep one HELP per family), and the settings are series instead."""
    bodies: list[str | ScrapeError] = [capture("t0"), with_engines(capture("t3"), 2) + probe_text()]
    tap = {(MODEL, "0"): Totals()}
    _, one = await poll_all(bodies, tap_counts=tap)
    _, other = await poll_all(
        bodies, tap_counts=tap, window=60, interval=2, cost=DraftCost(0.05, "flag", None)
    )

    def helps(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        return [line for line in text.splitlines() if line.startswith("# HELP")]

    assert helps(one) == helps(other)
    assert len(helps(one)) > 20
    assert value(other, "specdec_window_seconds") == 60.0
    assert value(other, "specdec_poll_interval_seconds") == 2.0
    assert value(other, "specdec_draft_cost_ratio", source="flag") == 0.05
    assert value(one, "specdec_window_seconds") == 3600.0


async def test_coverage_above_one_is_exported_as_counted_and_its_help_says_why() -> None:
    """A sequence is attributed when it finishes, vLLM counts its drafts as they happen: over a
    window, the split can attribute more than vLLM counted in it (1.0049 was seen live). The
    figure stays what was counted; the HELP says why it can exceed 1."""
    tap: dict[BucketKey, Totals] = {(MODEL, "0"): Totals()}
    clock = Clock()
    poller = Poller(
        ScriptedSource([capture("t0"), capture("t1")]),
        interval=5,
        window=60,
        cost=COST,
        log_interval=60,
        clock=clock,
        tap_counts=lambda _state: tap,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SpecDecodeCollector(
            poller.state, cost=COST, method=None, interval=5, window=60, coverage_enabled=True
        )
    )
    await poller.poll_once()
    clock.now += 5
    tap[(MODEL, "0")] = Totals(2500, 10000, 8000)  # vLLM counted 9448 draft tokens t0 -> t1
    await poller.poll_once()
    coverage = value(registry, "specdec_request_coverage_ratio", model_name=MODEL)
    assert coverage == 10000 / 9448
    text = generate_latest(registry).decode()
    (help_line,) = [line for line in text.splitlines() if "HELP specdec_request_coverage" in line]
    assert "Above 1 for a while: a sequence's draft tokens are attributed when it finishes" in (
        help_line
    )


def test_the_splits_help_is_the_same_whichever_source_feeds_it() -> None:
    """One pod's split from the engine probe, another's from the tap: the same families must
    carry the same HELP, or Prometheus and Thanos see conflicting metadata across targets."""
    from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.core.probe_parse import parse_probe  # noqa: PLC0415
    from specdec_exporter.sidecar.split_families import temperature_families  # noqa: PLC0415
    from specdec_exporter.tap.stats import RequestStats  # noqa: PLC0415

    tap = {
        f.name: f.documentation for f in RequestStats(TemperatureBuckets(), lambda _: 4).describe()
    }
    probe = {f.name: f.documentation for f in temperature_families(parse_probe(probe_text()))}
    assert set(probe) < set(tap)
    assert {name: tap[name] for name in probe} == probe

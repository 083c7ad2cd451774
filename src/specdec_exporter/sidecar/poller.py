"""Polls vLLM on the sidecar's own clock and keeps the state the collector and `/` read.

Polling on our own clock (not on Prometheus' scrape) gives a timeline of counter values for
windowed figures (modelled speedup, tap coverage) whatever Prometheus' scrape interval is.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from prometheus_client.core import Metric

from specdec_exporter.core.acceptance import Totals, ratio
from specdec_exporter.core.batch_report import BatchEntry, batch_entries
from specdec_exporter.core.calibration import Calibration
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import (
    INVALID_REASONS,
    InvalidReason,
    InvalidSeries,
    SeriesKey,
    Snapshot,
)
from specdec_exporter.core.probe_parse import NO_PROBE, ProbeSnapshot
from specdec_exporter.core.report import (
    ALL_ENGINES,
    BucketKey,
    Entry,
    bucket_entries,
    build_report,
)
from specdec_exporter.core.speculative_method import SpeculativeChoice
from specdec_exporter.core.timeline import Timeline
from specdec_exporter.core.verdict import DEFAULT_CRITERIA, Criteria
from specdec_exporter.logs import RateLimiter
from specdec_exporter.sidecar.config import DEFAULT_MAX_MODELS, DEFAULT_MODEL_EXPIRY
from specdec_exporter.sidecar.engine_config import EngineConfigWatch
from specdec_exporter.sidecar.history import AcceptanceHistory, SeriesId
from specdec_exporter.sidecar.scraper import (
    FAILURE_REASONS,
    PROBE_FILES_FAILURES,
    FailureReason,
    ProbeFilesFailure,
    Scrape,
    ScrapeError,
)
from specdec_exporter.sidecar.split import SplitSource, SplitWindows, TapFamilies

log = logging.getLogger("specdec_exporter.sidecar.poller")

TapCounts = Callable[["PollState"], Mapping[BucketKey, Totals]]
"""The request tap's cumulative attributed counts (drafts, draft and accepted tokens) per bucket,
asked for after each successful poll with the state it just updated: the windowed bucket figures
and the coverage ratio come from them."""

MAX_MODEL_NAME_CHARS = 256
"""Longer model names never get per-model tap series (their requests count as ``other``)."""

DropReason = Literal["cap", "name_too_long"]
DROP_REASONS: tuple[DropReason, ...] = ("cap", "name_too_long")


class SnapshotSource(Protocol):
    """Anything that scrapes vLLM (the HTTP Scraper; a scripted source in tests)."""

    async def scrape(self) -> Scrape: ...


@dataclass
class PollState:
    """What the last polls found. `snapshot` is the last successful one, None while vLLM is down."""

    up: bool = False
    ever_up: bool = False
    """A poll of vLLM has succeeded since the sidecar started: tells "still starting" from
    "went down" while `up` is False."""
    attempts: int = 0
    scrape_duration: float | None = None
    failures: dict[FailureReason, int] = field(
        default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0)
    )
    probe_files_failures: dict[ProbeFilesFailure, int] | None = None
    """Polls that could not read the engine probe's files, by reason (the poll went on with the
    probe's last reading held); None: the sidecar does not read them (no ``--probe-dir``)."""
    snapshot: Snapshot | None = None
    report: list[Entry] = field(default_factory=list)
    window_seconds: float = 0.0
    coverage: dict[str, float] = field(default_factory=dict)
    models_seen: frozenset[str] = frozenset()
    """The models vLLM serves (or served in the last expiry period) that get per-model tap
    series: at most the cap, names of at most MAX_MODEL_NAME_CHARS."""
    buckets: dict[BucketKey, Entry] = field(default_factory=dict)
    """The split's figures per (model, temperature bucket) over the same window (engine "all"),
    from the source in ``temperature_split_source``."""
    temperature_split_source: SplitSource = "none"
    split_families: list[Metric] = field(default_factory=list)
    """The split's exported counters after the last successful poll (``split.SplitCounters``)."""
    probe: ProbeSnapshot = NO_PROBE
    """The engine probe's families on this poll (``NO_PROBE``: none there, or the poll failed)."""
    probe_seen: ProbeSnapshot = NO_PROBE
    """The engine probe as the last successful poll saw it, kept while vLLM does not answer: its
    health (split on or off, hook errors) is mirrored from it, so a failed poll now and then does
    not restart the clock of the alert on a split that is off."""
    batch_buckets: list[BatchEntry] = field(default_factory=list)
    """The probe's figures per (model, engine, running-batch bucket) over the same window."""
    speculative: SpeculativeChoice | None = None
    """The method the figures rest on, where it came from, and c (None: the poller's fixed c);
    kept while vLLM does not answer."""
    history: AcceptanceHistory = field(default_factory=AcceptanceHistory)
    models_dropped: dict[DropReason, int] = field(
        default_factory=lambda: dict.fromkeys(DROP_REASONS, 0)
    )
    invalid_series: dict[InvalidReason, int] = field(
        default_factory=lambda: dict.fromkeys(INVALID_REASONS, 0)
    )
    last_poll_at: float | None = None
    """Wall-clock time (Unix seconds) of the latest poll, whatever its outcome: the charts'
    absolute time axis (the history's ages count back from it)."""
    last_success_at: float | None = None
    """Wall-clock time of the latest successful poll; None: none since the sidecar started."""
    last_error: ScrapeError | None = None
    """Why the latest poll failed (reason and detail); None after a successful one."""
    failed_in_a_row: int = 0


@dataclass(frozen=True)
class _SplitFigures:
    """What one poll's fold computed for the temperature and batch splits."""

    source: SplitSource
    buckets: dict[BucketKey, Entry]
    batch_buckets: list[BatchEntry]
    coverage: dict[str, float]
    families: list[Metric]
    """The split's exported families (the sidecar's own counters, continuous across sources)."""


def _raised_at(error: BaseException) -> str:
    """``file.py:line`` where ``error`` was raised (its innermost frame)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "unknown"
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}"


class ModelRoster:
    """Which served models get per-model tap series: bounded, and forgetting the ones vLLM stopped
    serving after ``expire_after`` successful polls without them (failed polls never count)."""

    def __init__(self, cap: int, expire_after: int) -> None:
        self._cap = cap
        self._expire_after = expire_after
        self._missed: dict[str, int] = {}
        self._refused: frozenset[str] = frozenset()

    @property
    def models(self) -> frozenset[str]:
        return frozenset(self._missed)

    def update(self, served: frozenset[str]) -> dict[DropReason, int]:
        """Fold in one successful poll; returns the names newly refused, by reason."""
        for model in list(self._missed):
            missed = 0 if model in served else self._missed[model] + 1
            if missed >= self._expire_after:
                del self._missed[model]
            else:
                self._missed[model] = missed
        dropped = dict.fromkeys(DROP_REASONS, 0)
        refused = set()
        for model in sorted(served - self._missed.keys()):
            reason: DropReason | None = (
                "name_too_long"
                if len(model) > MAX_MODEL_NAME_CHARS
                else "cap"
                if len(self._missed) >= self._cap
                else None
            )
            if reason is None:
                self._missed[model] = 0
                continue
            refused.add(model)
            if model not in self._refused:  # count a name once, not on every poll showing it
                dropped[reason] += 1
        self._refused = frozenset(refused)
        return dropped


class Poller:
    """Runs `scraper` every `interval` seconds and folds each result into `state`."""

    def __init__(
        self,
        scraper: SnapshotSource,
        *,
        interval: float,
        window: float,
        cost: DraftCost,
        log_interval: float,
        criteria: Criteria = DEFAULT_CRITERIA,
        tap_counts: TapCounts | None = None,
        tap_families: TapFamilies | None = None,
        calibration: Calibration | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        max_models: int = DEFAULT_MAX_MODELS,
        model_expiry: float = DEFAULT_MODEL_EXPIRY,
        engine_config: EngineConfigWatch | None = None,
        probe_files: bool = False,
    ) -> None:
        """``engine_config``: c follows the method vLLM's config shows (else ``cost`` stays).
        ``probe_files``: the scraper reads the engine probe's files (its read failures are
        counted from the start)."""
        self.state = PollState(history=AcceptanceHistory(interval))
        if probe_files:
            self.state.probe_files_failures = dict.fromkeys(PROBE_FILES_FAILURES, 0)
        self._engine_config = engine_config
        if engine_config is not None:
            self.state.speculative = engine_config.choice
            cost = engine_config.choice.cost
        self._roster = ModelRoster(max_models, max(1, math.ceil(model_expiry / interval)))
        self._scraper = scraper
        self._interval = interval
        self._cost = cost
        self._criteria = criteria
        self._calibration = calibration
        self._clock = clock
        self._wall_clock = wall_clock
        self._timeline: Timeline[SeriesKey] = Timeline(window)
        self._split = SplitWindows(
            window,
            None if tap_counts is None else functools.partial(tap_counts, self.state),
            tap_families,
        )
        self._limiter = RateLimiter(log_interval)
        self.first_poll_done = asyncio.Event()

    async def run(self) -> None:
        """Poll at a fixed rate until cancelled; a slow poll delays the next, never overlaps."""
        next_at = self._clock()
        while True:
            await self.poll_once()
            next_at = max(next_at + self._interval, self._clock())
            await asyncio.sleep(next_at - self._clock())

    async def poll_once(self) -> None:
        """Scrape vLLM and fold the result into ``state``, under one guard: whatever goes wrong
        (vLLM's answer, or a bug in what is computed from it) is a failed poll, never the end of
        the poller; the next poll runs."""
        try:
            scrape = await self._scraper.scrape()
            files_failures = self.state.probe_files_failures
            if scrape.probe_files_failure is not None and files_failures is not None:
                files_failures[scrape.probe_files_failure] += 1
            self._record(scrape.snapshot, scrape.duration, scrape.probe)
        except ScrapeError as failure:
            self._record_failure(failure)
        except Exception as exc:  # a bug must not stop the sidecar from serving self-health
            where = _raised_at(exc)
            self._log_internal_error(exc, where)
            detail = f"internal error: {type(exc).__name__} at {where}"
            self._record_failure(ScrapeError("internal", detail), log_it=False)
        finally:
            self.state.attempts += 1
            self.state.last_poll_at = self._wall_clock()
            self.first_poll_done.set()

    def _record(self, snapshot: Snapshot, duration: float, probe: ProbeSnapshot = NO_PROBE) -> None:
        """Fold one successful scrape: every figure is computed first and written to ``state``
        only once all are, so a poll whose fold fails leaves no half-updated figures."""
        now = self._clock()
        state = self.state
        for reason, count in self._roster.update(snapshot.models).items():
            state.models_dropped[reason] += count
        state.models_seen = self._roster.models  # the tap's attribution reads it (TapCounts)
        if snapshot.invalid or probe.invalid:
            self._count_invalid((*snapshot.invalid, *probe.invalid))
        speculative = None
        if self._engine_config is not None:  # the method (so c) the figures below rest on
            speculative = self._engine_config.observe(probe)
            self._cost = speculative.cost
        self._timeline.observe(now, snapshot.counters)
        window = self._timeline.window()
        report = build_report(snapshot, window, self._cost, self._criteria)
        split = self._fold_split(now, snapshot, probe, window.deltas)
        history: dict[SeriesId, float | None] = {
            (e.model_name, None): e.acceptance_rate for e in report if e.engine == ALL_ENGINES
        }
        history.update((key, e.acceptance_rate) for key, e in split.buckets.items())
        if not state.up and state.attempts:
            log.info("vLLM scrape recovered", extra={"failed_polls": state.failed_in_a_row})
            self._limiter.reset("scrape")
        state.failed_in_a_row, state.last_error = 0, None
        state.last_success_at = self._wall_clock()
        state.up, state.ever_up = True, True
        state.scrape_duration, state.snapshot = duration, snapshot
        state.report, state.window_seconds = report, window.seconds
        if speculative is not None:
            state.speculative = speculative
        state.probe = state.probe_seen = probe
        state.temperature_split_source = split.source
        state.buckets, state.batch_buckets = split.buckets, split.batch_buckets
        state.coverage = split.coverage
        state.split_families = split.families
        state.history.record(now, history)

    def _fold_split(
        self,
        now: float,
        snapshot: Snapshot,
        probe: ProbeSnapshot,
        vllm_deltas: dict[SeriesKey, Totals],
    ) -> _SplitFigures:
        """The temperature split (probe or tap) and the probe's batch buckets over the same
        window: figures per bucket, and coverage per model."""
        window = self._split.observe(now, probe)
        buckets = bucket_entries(
            snapshot,
            window.deltas,
            seconds=window.seconds,
            cost=self._cost,
            criteria=self._criteria,
        )
        batch = self._split.batch_window()
        batch_buckets = batch_entries(
            snapshot,
            batch.deltas,
            seconds=batch.seconds,
            cost=self._cost,
            criteria=self._criteria,
            calibration=self._calibration,
        )
        source = self._split.source
        if source == "none":
            return _SplitFigures(source, buckets, batch_buckets, {}, self._split.exported)
        attributed: dict[str, float] = {}
        for (model, _), counts in window.deltas.items():
            attributed[model] = attributed.get(model, 0.0) + counts.draft_tokens
        counted: dict[str, float] = {}
        for (model, _), totals in vllm_deltas.items():
            counted[model] = counted.get(model, 0.0) + totals.draft_tokens
        coverage = {
            model: share
            for model, tokens in counted.items()
            if (share := ratio(attributed.get(model, 0.0), tokens)) is not None
        }
        return _SplitFigures(source, buckets, batch_buckets, coverage, self._split.exported)

    def _count_invalid(self, invalid: tuple[InvalidSeries, ...]) -> None:
        for series in invalid:
            self.state.invalid_series[series.reason] += 1
        emit, suppressed = self._limiter.allow("invalid")
        if emit:  # names only: a label value is vLLM's data and may be arbitrarily long
            log.warning(
                "vLLM exposed series no count can be; dropped with every figure derived from them",
                extra={
                    "series": sorted({f"{s.name} ({s.reason})" for s in invalid}),
                    "suppressed_since_last": suppressed,
                },
            )

    def _log_internal_error(self, error: Exception, where: str) -> None:
        """One line with its type, file:line and traceback per log interval: a bug hit on every
        poll must not flood."""
        emit, suppressed = self._limiter.allow("internal")
        if emit:
            log.error(
                "unexpected error while polling vLLM",
                extra={
                    "error_type": type(error).__name__,
                    "at": where,
                    "suppressed_since_last": suppressed,
                },
                exc_info=error,
            )

    def _record_failure(self, failure: ScrapeError, *, log_it: bool = True) -> None:
        state = self.state
        state.up, state.snapshot, state.report, state.coverage = False, None, [], {}
        state.buckets, state.batch_buckets, state.probe = {}, [], NO_PROBE
        state.split_families = []
        state.history.record(self._clock(), {})
        state.failures[failure.reason] += 1
        state.failed_in_a_row += 1
        state.last_error = failure
        if not log_it:
            return
        emit, suppressed = self._limiter.allow("scrape")
        if emit:
            log.warning(
                "vLLM scrape failed",
                extra={
                    "reason": failure.reason,
                    "detail": failure.detail,
                    "suppressed_since_last": suppressed,
                },
            )

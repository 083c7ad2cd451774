"""Polls vLLM on the sidecar's own clock and keeps the state the collector and `/` read.

Polling on our own clock (not on Prometheus' scrape) gives a timeline of counter values for
windowed figures (modelled speedup, tap coverage) whatever Prometheus' scrape interval is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.exposition import SeriesKey, Snapshot
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.report import Entry, build_report, snapshot_totals
from specdec_exporter.core.timeline import Timeline
from specdec_exporter.core.verdict import DEFAULT_CRITERIA, Criteria
from specdec_exporter.logs import RateLimiter
from specdec_exporter.sidecar.scraper import FAILURE_REASONS, FailureReason, Scrape, ScrapeError

log = logging.getLogger("specdec_exporter.sidecar.poller")

AttributedDraftTokens = Callable[[], dict[str, float]]
"""Cumulative draft tokens the request tap attributed, per model (for the coverage ratio)."""


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
    snapshot: Snapshot | None = None
    report: list[Entry] = field(default_factory=list)
    window_seconds: float = 0.0
    coverage: dict[str, float] = field(default_factory=dict)
    models_seen: frozenset[str] = frozenset()


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
        attributed: AttributedDraftTokens | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = PollState()
        self._scraper = scraper
        self._interval = interval
        self._cost = cost
        self._criteria = criteria
        self._attributed = attributed
        self._clock = clock
        self._timeline: Timeline[SeriesKey] = Timeline(window)
        self._tap_timeline: Timeline[str] = Timeline(window)
        self._limiter = RateLimiter(log_interval)
        self.first_poll_done = asyncio.Event()
        self._failed_in_a_row = 0

    async def run(self) -> None:
        """Poll at a fixed rate until cancelled; a slow poll delays the next, never overlaps."""
        next_at = self._clock()
        while True:
            await self.poll_once()
            next_at = max(next_at + self._interval, self._clock())
            await asyncio.sleep(next_at - self._clock())

    async def poll_once(self) -> None:
        try:
            scrape = await self._scraper.scrape()
        except ScrapeError as failure:
            self._record_failure(failure)
        except Exception as exc:  # a bug must not stop the sidecar from serving self-health
            log.exception("unexpected error while polling vLLM")
            self._record_failure(ScrapeError("parse", f"internal error: {type(exc).__name__}"))
        else:
            self._record(scrape.snapshot, scrape.duration)
        finally:
            self.state.attempts += 1
            self.first_poll_done.set()

    def _record(self, snapshot: Snapshot, duration: float) -> None:
        now = self._clock()
        state = self.state
        if not state.up and state.attempts:
            log.info("vLLM scrape recovered", extra={"failed_polls": self._failed_in_a_row})
            self._limiter.reset("scrape")
        self._failed_in_a_row = 0
        state.up, state.ever_up = True, True
        state.scrape_duration, state.snapshot = duration, snapshot
        state.models_seen = state.models_seen | snapshot.models
        totals = snapshot_totals(snapshot)
        self._timeline.observe(now, totals)
        window = self._timeline.window()
        state.report = build_report(snapshot, window, self._cost, self._criteria)
        state.window_seconds = window.seconds
        if self._attributed is not None:
            self._observe_tap(now, window.deltas)

    def _observe_tap(self, now: float, vllm_deltas: dict[SeriesKey, Totals]) -> None:
        assert self._attributed is not None
        attributed = {
            model: Totals(draft_tokens=tokens) for model, tokens in self._attributed().items()
        }
        self._tap_timeline.observe(now, attributed)
        tap_deltas = self._tap_timeline.window().deltas
        counted: dict[str, float] = {}
        for (model, _), totals in vllm_deltas.items():
            counted[model] = counted.get(model, 0.0) + totals.draft_tokens
        self.state.coverage = {
            model: tap_deltas.get(model, Totals()).draft_tokens / tokens
            for model, tokens in counted.items()
            if tokens > 0
        }

    def _record_failure(self, failure: ScrapeError) -> None:
        state = self.state
        state.up, state.snapshot, state.report, state.coverage = False, None, [], {}
        state.failures[failure.reason] += 1
        self._failed_in_a_row += 1
        emit, suppressed = self._limiter.allow("scrape")
        if emit:
            log.warning(
                "vLLM scrape failed",
                extra={"reason": failure.reason, "detail": failure.detail,
                       "suppressed_since_last": suppressed},
            )

"""The sweep run: one load phase per temperature, scraping vLLM's counters around each phase.

``run_sweep(config)`` is the in-process entry point. Phases never overlap, so a counter delta
taken around a phase belongs to that temperature alone (if nothing else talks to the server).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from specdec_exporter.devtools.load.counters import (
    CounterReading,
    counters_settled,
    expected_generation_tokens,
    model_totals,
    phase_delta,
)
from specdec_exporter.devtools.load.mix import temperature_label
from specdec_exporter.devtools.load.results import LoadResult
from specdec_exporter.devtools.load.runner import Progress, run_load
from specdec_exporter.devtools.sweep.config import Source, SweepConfig
from specdec_exporter.devtools.sweep.phase import (
    PhaseAcceptance,
    PhaseRow,
    choose_source,
    counter_acceptance,
    per_request_acceptance,
    phase_row,
)
from specdec_exporter.sidecar.scraper import ScrapeError, Scraper


class SweepError(RuntimeError):
    """The sweep cannot give figures (counters needed but /metrics unusable); one line."""


@dataclass(frozen=True)
class SweepProgress:
    phase: int
    """0-based index of the running phase."""
    label: str
    done: int
    """Requests completed in the whole sweep so far."""
    errors: int
    settling: bool = False
    """True while waiting for vLLM's counters to take in the phase's last requests."""


SweepProgressCallback = Callable[[SweepProgress], None]


@dataclass(frozen=True)
class SweepResult:
    model: str
    source: Source | None
    """The source used for every row; None if no phase had a successful request to decide."""
    rows: tuple[PhaseRow, ...]


async def run_sweep(
    config: SweepConfig,
    on_progress: SweepProgressCallback | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> SweepResult:
    """Run every phase in order; ``transport`` (tests) carries both the load and the scrapes."""
    async with httpx.AsyncClient(
        transport=transport, trust_env=False, verify=config.vllm_ssl_context()
    ) as client:
        scraper = Scraper(
            client,
            config.metrics_base_url,
            timeout=config.scrape_timeout,
            max_body_bytes=config.max_body_bytes,
        )
        return await _Sweep(config, scraper, on_progress, transport).execute()


class _Sweep:
    def __init__(
        self,
        config: SweepConfig,
        scraper: Scraper,
        on_progress: SweepProgressCallback | None,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self._config = config
        self._scraper = scraper
        self._on_progress = on_progress
        self._transport = transport
        self._source: Source | None = None if config.source == "auto" else config.source
        self._model = config.model
        self._reading: CounterReading | None = None
        self._scrape_error: str | None = None
        self._done = 0
        self._errors = 0

    async def execute(self) -> SweepResult:
        if self._source != "per-request":
            await self._first_reading()
        rows = []
        for index, temperature in enumerate(self._config.temperatures):
            rows.append(await self._phase(index, temperature))
        model = self._model or ""
        return SweepResult(model, self._source, tuple(rows))

    async def _first_reading(self) -> None:
        try:
            self._reading = CounterReading.of((await self._scraper.scrape()).snapshot)
        except ScrapeError as exc:
            if self._source == "counters":
                raise SweepError(self._scrape_failure(exc)) from None
            self._scrape_error = str(exc)

    def _scrape_failure(self, exc: ScrapeError | str) -> str:
        return f"cannot read {self._config.metrics_base_url}/metrics ({exc})"

    async def _phase(self, index: int, temperature: float | None) -> PhaseRow:
        label = temperature_label(temperature)
        load = await self._run_load(index, label, temperature)
        self._model = load.model
        if self._source is None:
            self._source = choose_source(self._config.source, load.results)
        if self._source == "per-request":
            return phase_row(
                label, load.results, load.elapsed, per_request_acceptance(load.results)
            )
        if self._source is None and self._reading is None:
            return phase_row(label, load.results, load.elapsed, None)  # nothing to measure
        acceptance, settled = await self._counter_phase(index, label, load)
        return phase_row(label, load.results, load.elapsed, acceptance, settled)

    async def _run_load(self, index: int, label: str, temperature: float | None) -> LoadResult:
        done_before, errors_before = self._done, self._errors

        def forward(progress: Progress) -> None:
            self._done, self._errors = done_before + progress.done, errors_before + progress.errors
            self._report(index, label)

        phase_config = self._config.phase_load(temperature, self._model)
        return await run_load(phase_config, forward, transport=self._transport)

    def _report(self, index: int, label: str, settling: bool = False) -> None:
        if self._on_progress is not None:
            self._on_progress(SweepProgress(index, label, self._done, self._errors, settling))

    async def _counter_phase(
        self, index: int, label: str, load: LoadResult
    ) -> tuple[PhaseAcceptance, bool]:
        """Counter delta over the phase (the source is counters, or still undecided)."""
        before = self._reading
        if before is None:
            raise SweepError(
                "responses carry no per-request metrics and "
                + self._scrape_failure(self._scrape_error or "no reading")
                + "; give --metrics-url where vLLM's /metrics is"
            )
        self._report(index, label, settling=True)
        after, settled = await self._settled_reading(before, load)
        self._reading = after
        delta = phase_delta(before, after, load.model)
        return counter_acceptance(delta, after.spec_enabled), settled

    async def _settled_reading(
        self, before: CounterReading, load: LoadResult
    ) -> tuple[CounterReading, bool]:
        """Re-scrape until two consecutive scrapes agree (and hold the phase's tokens)."""
        expected = expected_generation_tokens(load.results)
        deadline = time.monotonic() + self._config.settle_timeout
        base = model_totals(before.totals, load.model)
        previous = await self._scrape_until(deadline)
        while True:
            await asyncio.sleep(self._config.settle_interval)
            current = await self._scrape_until(deadline)
            settled = counters_settled(
                base,
                model_totals(previous.totals, load.model),
                model_totals(current.totals, load.model),
                expected,
            )
            if settled or time.monotonic() >= deadline:
                return current, settled
            previous = current

    async def _scrape_until(self, deadline: float) -> CounterReading:
        """One successful scrape; failed ones are retried until the deadline."""
        while True:
            try:
                return CounterReading.of((await self._scraper.scrape()).snapshot)
            except ScrapeError as exc:
                if time.monotonic() >= deadline:
                    raise SweepError(self._scrape_failure(exc)) from None
            await asyncio.sleep(self._config.settle_interval)

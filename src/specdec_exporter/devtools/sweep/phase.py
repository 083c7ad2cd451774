"""Pure figures of one sweep phase: acceptance from per-request metrics or counter deltas.

No I/O: takes the load generator's request results and (for the counters source) the summed
counter delta of the phase, and returns the row the report prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specdec_exporter.core.acceptance import (
    Totals,
    acceptance_rate,
    mean_acceptance_length,
)
from specdec_exporter.core.verdict import Verdict, verdict
from specdec_exporter.devtools.load.results import RequestResult, SpecDecoding
from specdec_exporter.devtools.load.stats import TemperatureRow, percentile, summarise_bucket
from specdec_exporter.devtools.sweep.config import Source, SourceChoice

PERCENTILES = (10, 50, 90)


@dataclass(frozen=True)
class PhaseAcceptance:
    """A phase's acceptance counts from one source, and the figures derived from them."""

    source: Source
    drafts: float
    """Verify steps with at least one draft token (Σ num_spec_steps, or Δ num_drafts)."""
    draft_tokens: float
    accepted_tokens: float
    spec_enabled: bool | None
    """None when unknown: per-request source and no response carried the metrics."""
    rate_percentiles: tuple[float | None, float | None, float | None] = (None, None, None)
    """P10, P50, P90 of per-request rates (requests that drafted); None for the counters."""
    requests_with_metrics: int | None = None
    requests_not_drafting: int | None = None
    """Requests whose metrics show no draft token: in the sums, not in the percentiles."""

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance_rate(self.accepted_tokens, self.draft_tokens)

    @property
    def mean_acceptance_length(self) -> float | None:
        return mean_acceptance_length(self.accepted_tokens, self.drafts)

    @property
    def verdict(self) -> Verdict | None:
        if self.spec_enabled is None:
            return None
        return verdict(self.spec_enabled, self.drafts, self.acceptance_rate)


def request_rate(spec: SpecDecoding) -> float | None:
    """One request's acceptance rate; None when it drafted nothing (not 0%)."""
    return acceptance_rate(spec.num_accepted_draft_tokens, spec.num_draft_tokens)


def per_request_acceptance(results: Sequence[RequestResult]) -> PhaseAcceptance:
    """Sums over the successful requests that carried ``metrics.speculative_decoding``."""
    specs = [result.spec for result in results if result.ok and result.spec is not None]
    rates = [rate for spec in specs if (rate := request_rate(spec)) is not None]
    p10, p50, p90 = (percentile(rates, q) for q in PERCENTILES)
    return PhaseAcceptance(
        source="per-request",
        drafts=sum(spec.num_spec_steps for spec in specs),
        draft_tokens=sum(spec.num_draft_tokens for spec in specs),
        accepted_tokens=sum(spec.num_accepted_draft_tokens for spec in specs),
        spec_enabled=True if specs else None,
        rate_percentiles=(p10, p50, p90),
        requests_with_metrics=len(specs),
        requests_not_drafting=len(specs) - len(rates),
    )


def counter_acceptance(delta: Totals, spec_enabled: bool) -> PhaseAcceptance:
    """Figures from the phase's counter delta, summed over engines (no per-request spread)."""
    return PhaseAcceptance(
        source="counters",
        drafts=delta.drafts,
        draft_tokens=delta.draft_tokens,
        accepted_tokens=delta.accepted_tokens,
        spec_enabled=spec_enabled,
    )


def choose_source(choice: SourceChoice, results: Sequence[RequestResult]) -> Source | None:
    """``auto``: per-request if every successful request carried the metrics, else counters.

    None when ``auto`` cannot decide yet: the phase had no successful request.
    """
    if choice != "auto":
        return choice
    succeeded = [result for result in results if result.ok]
    if not succeeded:
        return None
    return "per-request" if all(result.spec is not None for result in succeeded) else "counters"


@dataclass(frozen=True)
class PhaseRow:
    """One line of the report: the load figures of one temperature and its acceptance."""

    label: str
    load: TemperatureRow
    elapsed: float
    acceptance: PhaseAcceptance | None
    """None when no figure could be measured (no successful request)."""
    counters_settled: bool | None = None
    """Counters source only: False if the counters were still moving at the deadline."""
    results: tuple[RequestResult, ...] = field(default=(), repr=False, compare=False)
    """The phase's requests, as the load generator returned them (for callers and checks)."""

    @property
    def succeeded(self) -> int:
        return self.load.requests - self.load.errors


def phase_row(
    label: str,
    results: Sequence[RequestResult],
    elapsed: float,
    acceptance: PhaseAcceptance | None,
    counters_settled: bool | None = None,
) -> PhaseRow:
    """The row of a phase; acceptance is dropped when no request of the phase succeeded."""
    load = summarise_bucket(label, results, elapsed)
    measured = acceptance if load.requests > load.errors else None
    return PhaseRow(label, load, elapsed, measured, counters_settled, tuple(results))

"""Pure aggregation of request results: percentiles and one summary row per temperature."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specdec_exporter.core.request_metrics import SpecDecodeSummary
from specdec_exporter.devtools.load.mix import DEFAULT_TOKEN
from specdec_exporter.devtools.load.results import RequestResult

TOTAL_LABEL = "total"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolating linearly between ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class SpecSummary:
    """Per-request spec metrics summed over a bucket, and vLLM's two ratios of those sums."""

    requests: int
    num_spec_steps: int
    num_draft_tokens: int
    num_accepted_draft_tokens: int

    @property
    def totals(self) -> SpecDecodeSummary:
        return SpecDecodeSummary(
            self.num_spec_steps, self.num_draft_tokens, self.num_accepted_draft_tokens
        )

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None when nothing was drafted (not drafting, not 0%)."""
        return self.totals.acceptance_rate

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted tokens / verify steps (counts the bonus token); None with no steps."""
        return self.totals.acceptance_length


@dataclass(frozen=True)
class TemperatureRow:
    """One row of the summary. Latencies are seconds over successful requests only."""

    label: str
    requests: int
    errors: int
    output_tokens: int
    tokens_per_s: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    spec: SpecSummary | None
    errors_by_kind: dict[str, int] = field(default_factory=dict)


def summarise_bucket(
    label: str, results: Sequence[RequestResult], elapsed: float
) -> TemperatureRow:
    """One row: ``tokens_per_s`` divides the bucket's output tokens by the run's wall time."""
    succeeded = [result for result in results if result.ok]
    tokens = sum(result.output_tokens or 0 for result in succeeded)
    ttfts = [result.ttft for result in succeeded if result.ttft is not None]
    tpots = [tpot for result in succeeded if (tpot := result.tpot) is not None]
    errors = Counter(result.error for result in results if result.error is not None)
    return TemperatureRow(
        label=label,
        requests=len(results),
        errors=len(results) - len(succeeded),
        output_tokens=tokens,
        tokens_per_s=tokens / elapsed if elapsed > 0 else None,
        ttft_p50=percentile(ttfts, 50),
        ttft_p99=percentile(ttfts, 99),
        tpot_p50=percentile(tpots, 50),
        tpot_p99=percentile(tpots, 99),
        spec=summarise_spec(succeeded),
        errors_by_kind=dict(sorted(errors.items())),
    )


def summarise_spec(results: Iterable[RequestResult]) -> SpecSummary | None:
    specs = [result.spec for result in results if result.spec is not None]
    if not specs:
        return None
    return SpecSummary(
        requests=len(specs),
        num_spec_steps=sum(spec.num_spec_steps for spec in specs),
        num_draft_tokens=sum(spec.num_draft_tokens for spec in specs),
        num_accepted_draft_tokens=sum(spec.num_accepted_draft_tokens for spec in specs),
    )


def bucket_order(label: str) -> tuple[int, float]:
    """Numeric temperatures ascending, then ``default``."""
    return (1, 0.0) if label == DEFAULT_TOKEN else (0, float(label))


def summarise(results: Sequence[RequestResult], elapsed: float) -> list[TemperatureRow]:
    """One row per requested temperature (ascending, ``default`` last), then the total row."""
    by_label: dict[str, list[RequestResult]] = {}
    for result in results:
        by_label.setdefault(result.label, []).append(result)
    rows = [
        summarise_bucket(label, by_label[label], elapsed)
        for label in sorted(by_label, key=bucket_order)
    ]
    return [*rows, summarise_bucket(TOTAL_LABEL, results, elapsed)]

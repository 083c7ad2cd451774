"""Acceptance per running-batch bucket over a window, beside a calibration: the c measured at the
nearest concurrency, calibrate's proposed k for the bucket's sizes, and whether live acceptance has
moved away from the calibration run's (the proposal is stale). Pure: no I/O.

Concurrency is not batch size: calibrate's concurrency is how many requests its clients keep in
flight; a batch bucket counts the requests running in one engine step (vLLM's
``num_running_reqs``), which is at most the concurrency and smaller whenever requests wait,
prefill or finish. The nearest concurrency is the closest thing measured, not the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec_exporter.core.acceptance import Totals, acceptance_rate
from specdec_exporter.core.calibration import Calibration, ConcurrencyFit, Schedule
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import Snapshot
from specdec_exporter.core.report import Entry, entry
from specdec_exporter.core.values import ascii_count, finite_or_none
from specdec_exporter.core.verdict import Criteria

BatchKey = tuple[str, str, str]
"""(model_name, engine, batch_bucket)."""

STALE_TOLERANCE = 0.05
"""Live acceptance (accepted / draft tokens) further than this from the calibration run's, at the
nearest concurrency and the same k, marks the proposed schedule stale: 5 points, the drop that
vLLM's guidance on quantised targets treats as the signal to revisit a choice."""
STALE_MIN_DRAFT_TOKENS = 200
"""Fewer live draft tokens in a bucket's window than this: too few to call the proposal stale."""

NOT_PER_BATCH_BUCKET = ("per_position_acceptance_rate", "draft_share", "generation_tokens")
"""Entry fields the probe's per-step counts do not give per batch bucket."""
CONCURRENCY_IS_NOT_BATCH_SIZE = (
    "concurrency is not batch size: calibrate's concurrency is the requests its clients keep in "
    "flight; a batch bucket counts the requests running in one engine step (at most the "
    "concurrency, fewer while requests wait, prefill or finish); c and the calibration "
    "acceptance come from the calibrated concurrency nearest to the bucket's sizes"
)


@dataclass(frozen=True, slots=True)
class BatchRange:
    """The batch sizes of a bucket label: ``1`` -> 1..1, ``2-4`` -> 2..4, ``65+`` -> 65..None."""

    low: int
    high: int | None

    @property
    def representative(self) -> float:
        """The geometric middle of the sizes (sizes grow geometrically); the low end if open."""
        return self.low if self.high is None else math.sqrt(self.low * self.high)


def batch_range(label: str) -> BatchRange | None:
    """The range a batch-bucket label names (``core.buckets.BatchBuckets``), None if none.

    ASCII rules only: ``N``, ``N-M`` or ``N+`` with 1 <= N <= M, each a run of ASCII digits
    (``core.values.ascii_count``). "²", "٣", "0+", "4-2", "" and 10 KB of digits name no sizes.
    """
    if label.endswith("+"):
        low, high = ascii_count(label[:-1]), None
    else:
        first, dash, second = label.partition("-")
        low = ascii_count(first)
        high = ascii_count(second) if dash else low
        if high is None:
            return None
    if low is None or low < 1 or (high is not None and high < low):
        return None
    return BatchRange(low, high)


def nearest_fit(fits: Sequence[ConcurrencyFit], sizes: BatchRange) -> ConcurrencyFit | None:
    """The fitted concurrency closest to the bucket by ratio (ties: the higher concurrency,
    where drafting costs more)."""
    fitted = [fit for fit in fits if fit.draft_cost_ratio is not None]
    if not fitted:
        return None
    middle = math.log(sizes.representative)
    return min(fitted, key=lambda fit: (abs(math.log(fit.concurrency) - middle), -fit.concurrency))


def calibration_acceptance(
    calibration: Calibration, concurrency: int, k: int | None
) -> float | None:
    """Accepted / draft tokens pooled over the calibration run's points at ``concurrency`` drafting
    ``k`` tokens (all its temperatures); None when it measured no such point."""
    points = [
        point
        for point in calibration.points
        if point.concurrency == concurrency and (k is None or point.num_speculative_tokens == k)
    ]
    return acceptance_rate(
        sum(point.accepted_tokens for point in points), sum(point.draft_tokens for point in points)
    )


def proposed_ks(schedule: Schedule, sizes: BatchRange) -> list[int]:
    """The k the proposed schedule gives each size of the bucket, distinct and in order of size
    (vLLM keeps the last range's k beyond it and caps every k at num_speculative_tokens)."""
    ranges = schedule.num_speculative_tokens_per_batch_size
    if not ranges:
        return []
    top = max(sizes.low, ranges[-1][1]) if sizes.high is None else sizes.high
    cuts = sorted({sizes.low, *(low for low, _, _ in ranges if sizes.low < low <= top)})
    ks: list[int] = []
    for size in cuts:
        k = next((k for low, high, k in ranges if low <= size <= high), ranges[-1][2])
        k = min(k, schedule.num_speculative_tokens)
        if not ks or ks[-1] != k:
            ks.append(k)
    return ks


@dataclass(frozen=True)
class BatchEntry:
    """One (model, engine, batch bucket) over the window, beside the calibration if given."""

    batch_bucket: str
    steps: float | None
    """Engine steps in the window; None only where the count is not a finite number."""
    entry: Entry
    calibration_concurrency: int | None = None
    calibration_acceptance_rate: float | None = None
    proposed_num_speculative_tokens: tuple[int, ...] = ()
    proposal_stale: bool | None = None
    """True: live acceptance moved more than STALE_TOLERANCE from the calibration's; None: not
    enough to tell (no calibration, no such point, or too few draft tokens)."""

    def as_json(self) -> dict[str, Any]:
        figures = {
            name: value
            for name, value in self.entry.as_json().items()
            if name not in NOT_PER_BATCH_BUCKET and name not in ("model_name", "engine")
        }
        return {
            "model_name": self.entry.model_name,
            "engine": self.entry.engine,
            "batch_bucket": self.batch_bucket,
            "steps": self.steps,
            **figures,
            "calibration_concurrency": self.calibration_concurrency,
            "calibration_acceptance_rate": self.calibration_acceptance_rate,
            "proposed_num_speculative_tokens": list(self.proposed_num_speculative_tokens),
            "proposal_stale": self.proposal_stale,
        }


def is_stale(live: Totals, calibrated: float | None) -> bool | None:
    """Live acceptance further than STALE_TOLERANCE from ``calibrated``; None if unknowable."""
    rate = acceptance_rate(live.accepted_tokens, live.draft_tokens)
    if calibrated is None or rate is None or live.draft_tokens < STALE_MIN_DRAFT_TOKENS:
        return None
    return abs(rate - calibrated) > STALE_TOLERANCE


def batch_entries(
    snapshot: Snapshot,
    deltas: Mapping[BatchKey, Totals],
    *,
    seconds: float,
    cost: DraftCost,
    criteria: Criteria,
    calibration: Calibration | None = None,
) -> list[BatchEntry]:
    """Each bucket's window counts through ``core.report.entry`` (the model rows' code), with c
    from the calibration's nearest concurrency when c comes from a calibration; ordered by
    model, engine and bucket size."""
    rows = []
    for key in sorted(deltas, key=batch_key_order):
        model, engine, bucket = key
        counts = deltas[key]
        sizes = batch_range(bucket)
        k = snapshot.num_speculative_tokens(model)
        fit = None
        if calibration is not None and sizes is not None:
            fit = nearest_fit(calibration.concurrency_fits, sizes)
        bucket_cost = cost
        if fit is not None and fit.draft_cost_ratio is not None and cost.source == "calibration":
            bucket_cost = DraftCost(max(0.0, fit.draft_cost_ratio), "calibration", cost.method)
        made = entry(
            model,
            engine,
            counts,
            seconds=seconds,
            enabled=snapshot.spec_decode_enabled,
            k=k,
            cost=bucket_cost,
            criteria=criteria,
        )
        calibrated = (
            None
            if calibration is None or fit is None
            else calibration_acceptance(calibration, fit.concurrency, k)
        )
        schedule = None if calibration is None else calibration.schedule
        rows.append(
            BatchEntry(
                bucket,
                finite_or_none(counts.steps),
                made,
                calibration_concurrency=None if fit is None else fit.concurrency,
                calibration_acceptance_rate=calibrated,
                proposed_num_speculative_tokens=tuple(
                    proposed_ks(schedule, sizes) if schedule and sizes else ()
                ),
                proposal_stale=is_stale(counts, calibrated),
            )
        )
    return rows


def batch_key_order(key: BatchKey) -> tuple[str, int, str, int, str]:
    """Model, engine (numeric), then bucket by size."""
    model, engine, bucket = key
    sizes = batch_range(bucket)
    index = ascii_count(engine)
    return (
        model,
        index if index is not None else 1 << 30,
        engine,
        sizes.low if sizes else 1 << 30,
        bucket,
    )

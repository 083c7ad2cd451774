"""Pure counting of speculative decoding: counter deltas with resets, sums and ratios.

Definitions follow vLLM's own (``SpecDecodingProm`` docstring, its log line, ``vllm bench``):
acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts;
per-position rate[i] = accepted_per_position[i] / drafts; draft share = accepted / generated.
The speedup model is in ``model.py``, the verdict in ``verdict.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from specdec_exporter.core.values import finite_or_none


@dataclass(frozen=True, slots=True)
class Totals:
    """Additive spec-decode counts: a cumulative snapshot or the delta between two."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    generation_tokens: float = 0.0
    steps: float = 0.0
    """Engine steps that carried speculative figures (the probe's per-batch-bucket counts)."""

    def is_finite(self) -> bool:
        """Every count is a finite number (sums of counters near 1.8e308 overflow to inf)."""
        return all(
            math.isfinite(value)
            for value in (
                self.drafts,
                self.draft_tokens,
                self.accepted_tokens,
                self.generation_tokens,
                self.steps,
                *self.accepted_per_position,
            )
        )

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            _add_positions(self.accepted_per_position, other.accepted_per_position),
            self.generation_tokens + other.generation_tokens,
            self.steps + other.steps,
        )

    def __sub__(self, other: Totals) -> Totals:
        """Plain difference (for reset-corrected totals that never go down)."""
        negated = tuple(-value for value in other.accepted_per_position)
        return Totals(
            self.drafts - other.drafts,
            self.draft_tokens - other.draft_tokens,
            self.accepted_tokens - other.accepted_tokens,
            _add_positions(self.accepted_per_position, negated),
            self.generation_tokens - other.generation_tokens,
            self.steps - other.steps,
        )


def _add_positions(left: tuple[float, ...], right: tuple[float, ...]) -> tuple[float, ...]:
    size = max(len(left), len(right))
    padded_left = left + (0.0,) * (size - len(left))
    padded_right = right + (0.0,) * (size - len(right))
    return tuple(a + b for a, b in zip(padded_left, padded_right, strict=True))


def counter_delta(previous: float, current: float) -> float:
    """Increase of a counter; a lower value means the counter restarted from 0 (a reset)."""
    return current - previous if current >= previous else current


def totals_delta(previous: Totals, current: Totals) -> Totals:
    """Reset-aware delta, per counter; a change of k (other positions) counts as a reset."""
    if len(previous.accepted_per_position) != len(current.accepted_per_position):
        positions = current.accepted_per_position
    else:
        positions = tuple(
            counter_delta(before, after)
            for before, after in zip(
                previous.accepted_per_position, current.accepted_per_position, strict=True
            )
        )
    return Totals(
        counter_delta(previous.drafts, current.drafts),
        counter_delta(previous.draft_tokens, current.draft_tokens),
        counter_delta(previous.accepted_tokens, current.accepted_tokens),
        positions,
        counter_delta(previous.generation_tokens, current.generation_tokens),
        counter_delta(previous.steps, current.steps),
    )


def sum_totals(items: Iterable[Totals]) -> Totals:
    total = Totals()
    for item in items:
        total = total + item
    return total


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator; None when the denominator is not positive or the quotient is not
    a finite number (NaN or overflowed counts): a ratio without meaning is absent."""
    return finite_or_none(numerator / denominator) if denominator > 0 else None


def acceptance_rate(accepted_tokens: float, draft_tokens: float) -> float | None:
    """accepted / draft tokens; None when nothing was drafted (not drafting is not 0%)."""
    return ratio(accepted_tokens, draft_tokens)


def mean_acceptance_length(accepted_tokens: float, drafts: float) -> float | None:
    """1 + accepted tokens / drafts: tokens per verify step, the bonus token counted."""
    mean_accepted = ratio(accepted_tokens, drafts)
    return None if mean_accepted is None else finite_or_none(1.0 + mean_accepted)


@dataclass(frozen=True, slots=True)
class Figures:
    """Derived figures of one set of counts; None where the denominator is zero."""

    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance_rate: tuple[float | None, ...]
    draft_share: float | None
    mean_draft_length: float | None
    """Draft tokens / drafts: k when every draft is k tokens long, less with ngram."""


def figures(totals: Totals) -> Figures:
    return Figures(
        acceptance_rate=acceptance_rate(totals.accepted_tokens, totals.draft_tokens),
        mean_acceptance_length=mean_acceptance_length(totals.accepted_tokens, totals.drafts),
        per_position_acceptance_rate=tuple(
            ratio(accepted, totals.drafts) for accepted in totals.accepted_per_position
        ),
        draft_share=ratio(totals.accepted_tokens, totals.generation_tokens),
        mean_draft_length=ratio(totals.draft_tokens, totals.drafts),
    )

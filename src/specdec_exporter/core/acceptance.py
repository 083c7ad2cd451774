"""Pure maths of speculative decoding: counter deltas with resets, ratios, speedup model, verdict.

Definitions follow vLLM's own (``SpecDecodingProm`` docstring, its log line, ``vllm bench``):
acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts;
per-position rate[i] = accepted_per_position[i] / drafts; draft share = accepted / generated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

DISABLE_BELOW = 0.5
HEALTHY_ABOVE = 0.65
"""The published rule of thumb: < 0.5 a net loss, 0.5-0.65 borderline, > 0.65 a real win."""

DEFAULT_DRAFT_COST_RATIO = 0.1
DRAFT_COST_RATIO_BY_METHOD: dict[str, float] = {
    "draft_model": 0.1,
    "eagle": 0.05,
    "eagle3": 0.05,
    "mtp": 0.05,
    "dflash": 0.05,
    "dspark": 0.05,
    "ngram": 0.01,
    "ngram_gpu": 0.01,
    "suffix": 0.01,
}
"""Modelling assumptions (cost of one drafted token relative to one target step), see README."""


def draft_cost_ratio_for(method: str | None, configured: float | None) -> float:
    """The configured ratio, else the default of the speculative method, else 0.1."""
    if configured is not None:
        return configured
    if method is None:
        return DEFAULT_DRAFT_COST_RATIO
    if method.endswith("_mtp"):
        method = "mtp"
    return DRAFT_COST_RATIO_BY_METHOD.get(method, DEFAULT_DRAFT_COST_RATIO)


@dataclass(frozen=True, slots=True)
class Totals:
    """Additive spec-decode counts: a cumulative snapshot or the delta between two."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    generation_tokens: float = 0.0

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            _add_positions(self.accepted_per_position, other.accepted_per_position),
            self.generation_tokens + other.generation_tokens,
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
    )


def sum_totals(items: Iterable[Totals]) -> Totals:
    total = Totals()
    for item in items:
        total = total + item
    return total


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


@dataclass(frozen=True, slots=True)
class Figures:
    """Derived figures of one set of counts; None where the denominator is zero."""

    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance_rate: tuple[float | None, ...]
    draft_share: float | None


def figures(totals: Totals) -> Figures:
    mean_length = ratio(totals.accepted_tokens, totals.drafts)
    return Figures(
        acceptance_rate=ratio(totals.accepted_tokens, totals.draft_tokens),
        mean_acceptance_length=None if mean_length is None else 1.0 + mean_length,
        per_position_acceptance_rate=tuple(
            ratio(accepted, totals.drafts) for accepted in totals.accepted_per_position
        ),
        draft_share=ratio(totals.accepted_tokens, totals.generation_tokens),
    )


def estimated_speedup(mean_acceptance_length: float, k: int, cost_ratio: float) -> float:
    """Modelled speedup over plain decoding: L / (1 + k·c) (Leviathan et al. 2023)."""
    return mean_acceptance_length / (1.0 + k * cost_ratio)


def iid_mean_acceptance_length(alpha: float, k: int) -> float:
    """L for i.i.d. per-token acceptance alpha: (1 - alpha^(k+1)) / (1 - alpha)."""
    return float(sum(alpha**index for index in range(k + 1)))


def break_even_acceptance_rate(k: int, cost_ratio: float) -> float | None:
    """The alpha at which L(alpha) = 1 + k·c, i.e. modelled speedup 1; None if never reached."""
    target = 1.0 + k * cost_ratio
    if k <= 0 or target >= k + 1:
        return None
    if target <= 1.0:
        return 0.0
    low, high = 0.0, 1.0
    for _ in range(60):  # L is increasing in alpha; bisection to below 1e-15
        middle = (low + high) / 2
        if iid_mean_acceptance_length(middle, k) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


class Verdict(StrEnum):
    HEALTHY = "healthy"
    BORDERLINE = "borderline"
    DISABLE = "disable"
    NOT_DRAFTING = "not drafting"
    NOT_ENABLED = "not enabled"

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]


_EXIT_CODES = {
    Verdict.HEALTHY: 0,
    Verdict.BORDERLINE: 1,
    Verdict.NOT_DRAFTING: 1,
    Verdict.DISABLE: 2,
    Verdict.NOT_ENABLED: 2,
}


def verdict(enabled: bool, drafts: float, acceptance_rate: float | None,
            speedup: float | None = None) -> Verdict:
    """The rule of thumb, overruled by a speedup below 1 (with a calibrated c, a measured loss)."""
    if not enabled:
        return Verdict.NOT_ENABLED
    if drafts <= 0 or acceptance_rate is None:
        return Verdict.NOT_DRAFTING
    if acceptance_rate < DISABLE_BELOW or (speedup is not None and speedup < 1.0):
        return Verdict.DISABLE
    if acceptance_rate <= HEALTHY_ABOVE:
        return Verdict.BORDERLINE
    return Verdict.HEALTHY

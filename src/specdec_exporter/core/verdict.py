"""The one decision table behind `check`'s verdict, the landing page and the pages.

Keyed on the acceptance rate a, the paging threshold t and the speedup s (modelled with c from a
flag, a method default or a calibration). The alert rules implement the same rows in PromQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.values import finite_or_none

ACCEPTANCE_THRESHOLD = 0.5
"""t: the acceptance rate below which SpecDecodeAcceptanceLow pages (alerts/config.toml's
default must equal it; tools/generate.py checks)."""
HEALTHY_ABOVE = 0.65
"""Upper edge of the borderline band t <= a <= 0.65 (the published rule of thumb)."""
NET_LOSS_BELOW = 1.0
"""A speedup below 1: speculation costs more than it saves."""


@dataclass(frozen=True, slots=True)
class Criteria:
    """The thresholds of the table: t and the top of the borderline band."""

    threshold: float = ACCEPTANCE_THRESHOLD
    healthy_above: float = HEALTHY_ABOVE

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= self.healthy_above <= 1:
            raise ValueError(
                "need 0 < threshold <= healthy_above <= 1, got "
                f"threshold {self.threshold:g}, healthy_above {self.healthy_above:g}"
            )


DEFAULT_CRITERIA = Criteria()


class Verdict(StrEnum):
    HEALTHY = "healthy"
    BORDERLINE = "borderline"
    BELOW_THRESHOLD = "below threshold"
    DISABLE = "disable"
    NOT_DRAFTING = "not drafting"
    NOT_ENABLED = "not enabled"

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]


_EXIT_CODES = {
    Verdict.HEALTHY: 0,
    Verdict.BORDERLINE: 1,
    Verdict.BELOW_THRESHOLD: 1,
    Verdict.NOT_DRAFTING: 1,
    Verdict.DISABLE: 2,
    Verdict.NOT_ENABLED: 2,
}
SEVERITY_ORDER = (
    Verdict.HEALTHY,
    Verdict.NOT_DRAFTING,
    Verdict.BORDERLINE,
    Verdict.BELOW_THRESHOLD,
    Verdict.NOT_ENABLED,
    Verdict.DISABLE,
)
"""From best to worst: the overall verdict of several models is the worst of theirs."""


def verdict(
    enabled: bool,
    drafts: float,
    acceptance_rate: float | None,
    *,
    speedup: float | None = None,
    break_even: float | None = None,
    criteria: Criteria = DEFAULT_CRITERIA,
) -> Verdict:
    """The table. Without a speedup (k unknown) a low acceptance is only `below threshold`.
    A figure that is not a finite number counts as absent."""
    acceptance_rate, speedup = finite_or_none(acceptance_rate), finite_or_none(speedup)
    break_even = finite_or_none(break_even)
    if not enabled:
        return Verdict.NOT_ENABLED
    if not drafts > 0 or acceptance_rate is None:
        return Verdict.NOT_DRAFTING
    if (speedup is not None and speedup < NET_LOSS_BELOW) or (
        break_even is not None and break_even > 1
    ):
        return Verdict.DISABLE
    if acceptance_rate < criteria.threshold:
        return Verdict.BELOW_THRESHOLD
    if acceptance_rate <= criteria.healthy_above:
        return Verdict.BORDERLINE
    return Verdict.HEALTHY


def worst(verdicts: list[Verdict]) -> Verdict | None:
    return max(verdicts, key=SEVERITY_ORDER.index) if verdicts else None


def explain(
    result: Verdict,
    *,
    acceptance_rate: float | None,
    speedup: float | None,
    break_even: float | None,
    cost: DraftCost,
    criteria: Criteria,
) -> str:
    """One line naming the figures the verdict rests on: a, t, s and c."""
    t, top = criteria.threshold, criteria.healthy_above
    figures = (
        f"acceptance {_num(acceptance_rate)}, t = {t:g}, modelled speedup "
        f"{_num(speedup, '.2f')}, {cost.describe()}"
    )
    if result is Verdict.DISABLE:
        if break_even is not None and break_even > 1:
            return (
                f"break-even acceptance {break_even:.3g} > 1: at this c no acceptance pays; "
                f"speculation is a net loss ({figures}). Disable it or use a cheaper drafter"
            )
        return (
            f"modelled speedup below 1: speculation is a net loss ({figures}). Disable it, "
            "lower k or change the draft model"
        )
    if result is Verdict.BELOW_THRESHOLD:
        return (
            f"acceptance below t, but the model says speculation still pays ({figures}); "
            "calibrate, or lower t for this method"
        )
    if result is Verdict.BORDERLINE:
        return f"acceptance {t:g}-{top:g}: borderline ({figures}); measure P99 latency under load"
    if result is Verdict.HEALTHY:
        return f"acceptance above {top:g}: speculation pays here ({figures})"
    if result is Verdict.NOT_DRAFTING:
        return "no drafts in the window: no traffic, or the drafter proposes nothing"
    return "vLLM exposes no speculative-decoding metrics (no --speculative-config)"


def _num(value: float | None, spec: str = ".3f") -> str:
    return "unknown" if value is None else format(value, spec)

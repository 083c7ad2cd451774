"""The speedup model of speculative decoding, stated once: draft cost c, speedup, break-even.

a = accepted / draft tokens; L = 1 + accepted / drafts; modelled speedup = L / (1 + k·c)
(Leviathan et al. 2023); break-even = the a at which the modelled speedup is 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specdec_exporter.core.acceptance import ratio

DraftCostSource = Literal["flag", "calibration", "method", "default"]
"""Where c came from: `--draft-cost-ratio`, a `calibrate` measurement, the method's default,
or the default for an unknown or unset method."""
MEASURED_OR_SET: tuple[DraftCostSource, ...] = ("flag", "calibration")
"""Sources of c a page may rest on: measured by `calibrate` or set by a person. Any other source
(a method's default, the default) is an assumption: the speedup alert built on it tickets
(SpecDecodeSpeedupBelowOneAssumedCost), and the live page links that alert's section."""

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
METHODS_WITHOUT_COST: frozenset[str] = frozenset(
    {"custom_class", "extract_hidden_states", "medusa", "mlp_speculator"}
)
"""vLLM's other methods (``SpeculativeMethod`` in vllm/config/speculative.py): accepted, with the
default c, as nothing is assumed about their cost."""


def is_known_method(method: str) -> bool:
    """A method vLLM names: one of the table above, any ``*_mtp``, or METHODS_WITHOUT_COST."""
    return (
        method in DRAFT_COST_RATIO_BY_METHOD
        or method in METHODS_WITHOUT_COST
        or method.endswith("_mtp")
    )


def known_methods_text() -> str:
    """The methods a person may write, for an error message."""
    return ", ".join([*sorted(DRAFT_COST_RATIO_BY_METHOD), "*_mtp", *sorted(METHODS_WITHOUT_COST)])


@dataclass(frozen=True, slots=True)
class DraftCost:
    """c, the cost of one drafted token relative to one target step, and where it came from."""

    ratio: float
    source: DraftCostSource
    method: str | None = None

    def describe(self) -> str:
        """`c = 0.01 (default of method ngram)`, for a verdict's explanation."""
        origin = {
            "flag": "--draft-cost-ratio",
            "calibration": "calibration",
            "method": f"default of method {self.method}",
            "default": (
                "default, no --speculative-method"
                if self.method is None
                else f"default, no c assumed for method {self.method}"
            ),
        }[self.source]
        return f"c = {self.ratio:g} ({origin})"


def resolve_draft_cost(
    flag: float | None, method: str | None, calibrated: float | None
) -> DraftCost:
    """c from the flag, or a calibration's fitted c, else the method's default, else 0.1.

    A flag and a calibration both setting c contradict each other: ValueError, never a silent pick.
    So is a method vLLM does not name (a typo would silently give the default c), unless the flag
    or a calibration sets c, which then does not depend on the method.
    """
    if flag is not None and calibrated is not None:
        raise ValueError("--draft-cost-ratio and --calibration both set c: give one of them")
    if method is not None and flag is None and calibrated is None and not is_known_method(method):
        raise ValueError(
            f"unknown --speculative-method {method!r}; known: {known_methods_text()} (for a "
            "method this version does not know, give c with --draft-cost-ratio)"
        )
    if flag is not None:
        return DraftCost(flag, "flag", method)
    if calibrated is not None:
        return DraftCost(calibrated, "calibration", method)
    known = "mtp" if method is not None and method.endswith("_mtp") else method
    if known in DRAFT_COST_RATIO_BY_METHOD:
        return DraftCost(DRAFT_COST_RATIO_BY_METHOD[known], "method", method)
    return DraftCost(DEFAULT_DRAFT_COST_RATIO, "default", method)


def modelled_speedup(mean_acceptance_length: float, k: int, cost_ratio: float) -> float | None:
    """Speedup over plain decoding: L / (1 + k·c); None where 1 + k·c is not positive or the
    quotient is not finite."""
    return ratio(mean_acceptance_length, 1.0 + k * cost_ratio)


def break_even_acceptance_rate(
    k: int, cost_ratio: float, mean_draft_length: float | None = None
) -> float | None:
    """The acceptance rate a at which the modelled speedup is 1.

    With m = draft tokens / drafts, L = 1 + a·m, so L / (1 + k·c) = 1 at a = k·c / m: exactly c
    when every draft is k tokens long (m = k, the default). Above 1, no acceptance pays. None
    when m is 0: drafts whose every token a grammar invalidated (structured output) have no
    break-even.
    """
    drafted = k if mean_draft_length is None else mean_draft_length
    return ratio(k * cost_ratio, drafted)

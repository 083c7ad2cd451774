"""Calibration maths: the draft cost ratio c that measured TPOTs imply, per point and per
concurrency, vLLM's per-batch-size k schedule, and the calibration file's model. Pure: no I/O.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specdec_exporter.core.acceptance import Totals, figures, ratio
from specdec_exporter.core.model import modelled_speedup
from specdec_exporter.core.values import finite_or_none

TpotSource = Literal["client", "server"]
CalibrationKind = Literal["specdec-exporter calibration"]
"""client: TPOT as the client sees it; server: vLLM's per-request ``metrics.mean_itl_ms``."""

CALIBRATION_KIND: CalibrationKind = "specdec-exporter calibration"
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
"""vLLM's key in --speculative-config (vllm/config/speculative.py, vllm/v1/spec_decode/dynamic/)."""


def measured_speedup(tpot_base_ms: float, tpot_spec_ms: float) -> float | None:
    """The real speedup at one concurrency: the ratio of TPOTs, plain over speculative (None
    without a positive speculative TPOT, or when the ratio is not finite)."""
    return ratio(tpot_base_ms, tpot_spec_ms)


def fitted_draft_cost_ratio(mean_acceptance_length: float, k: int, speedup: float) -> float | None:
    """The c that solves L / (1 + k·c) = speedup: (L / speedup - 1) / k.

    Negative when speculation did better than L / 1 (drafting measured as free, or noise); None
    without a positive speedup and k, or when the figure is not finite."""
    per_speedup = ratio(mean_acceptance_length, speedup)
    return None if per_speedup is None else ratio(per_speedup - 1.0, k)


def break_even_from_cost_ratio(cost_ratio: float) -> float:
    """The acceptance rate a = accepted / draft tokens at which L / (1 + k·c) = 1.

    With every draft k tokens long, L = 1 + k·a, so the break-even is c itself
    (``core.model.break_even_acceptance_rate`` with m = k; 0 when the measured c is negative:
    speculation pays at any acceptance). Above 1: it never pays."""
    return max(0.0, cost_ratio)


class CalibrationPoint(BaseModel):
    """One (k, concurrency, temperature): the same seeded load against spec and plain servers."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    concurrency: int = Field(ge=1)
    temperature: float | None
    """As requested; None: no ``temperature`` key (the server's default)."""
    num_speculative_tokens: int = Field(ge=1)
    drafts: float = Field(ge=0)
    draft_tokens: float = Field(ge=0)
    accepted_tokens: float = Field(ge=0)
    """The spec server's /metrics counter deltas over the phase."""
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    tpot_spec_ms: float | None
    tpot_base_ms: float | None
    measured_speedup: float | None
    modelled_speedup: float | None
    """L / (1 + k·c) with the assumed c (flag or method default): what the sidecar would say."""
    draft_cost_ratio: float | None
    """The c that fits this point's measured speedup."""
    requests_spec: int = Field(ge=0)
    requests_base: int = Field(ge=0)
    """Successful requests whose TPOT was measured."""
    num_requests_running_spec: float | None = None
    num_requests_running_base: float | None = None
    """vLLM's num_requests_running gauge, mean of the samples taken during the phase."""


@dataclass(frozen=True)
class PhaseTiming:
    """What one server's phase measured: mean TPOT over requests, and vLLM's running gauge."""

    tpot_ms: float | None
    requests: int
    running: float | None = None


def make_point(
    *,
    concurrency: int,
    temperature: float | None,
    k: int,
    counts: Totals,
    spec: PhaseTiming,
    base: PhaseTiming,
    assumed_cost_ratio: float,
) -> CalibrationPoint:
    """The figures of one point from the spec server's counter delta and both timings."""
    derived = figures(counts)
    length = derived.mean_acceptance_length
    speedup = (
        None
        if spec.tpot_ms is None or base.tpot_ms is None
        else measured_speedup(base.tpot_ms, spec.tpot_ms)
    )
    return CalibrationPoint(
        concurrency=concurrency,
        temperature=temperature,
        num_speculative_tokens=k,
        drafts=counts.drafts,
        draft_tokens=counts.draft_tokens,
        accepted_tokens=counts.accepted_tokens,
        acceptance_rate=derived.acceptance_rate,
        mean_acceptance_length=length,
        tpot_spec_ms=spec.tpot_ms,
        tpot_base_ms=base.tpot_ms,
        measured_speedup=speedup,
        modelled_speedup=None
        if length is None
        else modelled_speedup(length, k, assumed_cost_ratio),
        draft_cost_ratio=(
            None
            if length is None or speedup is None or speedup <= 0
            else fitted_draft_cost_ratio(length, k, speedup)
        ),
        requests_spec=spec.requests,
        requests_base=base.requests,
        num_requests_running_spec=spec.running,
        num_requests_running_base=base.running,
    )


class ConcurrencyFit(BaseModel):
    """c at one client concurrency: the mean of its points' c (over temperatures and k)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    concurrency: int = Field(ge=1)
    draft_cost_ratio: float | None
    break_even_acceptance_rate: float | None
    num_requests_running_spec: float | None = None
    num_requests_running_base: float | None = None


def _mean(values: Iterable[float | None]) -> float | None:
    """The mean of the finite values given; None if there are none or it overflows."""
    present = [value for value in values if value is not None and math.isfinite(value)]
    try:
        return finite_or_none(fmean(present)) if present else None
    except OverflowError:  # fsum of values near 1.8e308
        return None


def fit_per_concurrency(points: Sequence[CalibrationPoint]) -> list[ConcurrencyFit]:
    """One fit per concurrency, in increasing order; None where no point could be fitted."""
    fits = []
    for concurrency in sorted({point.concurrency for point in points}):
        own = [point for point in points if point.concurrency == concurrency]
        cost = _mean(point.draft_cost_ratio for point in own)
        fits.append(
            ConcurrencyFit(
                concurrency=concurrency,
                draft_cost_ratio=cost,
                break_even_acceptance_rate=None
                if cost is None
                else break_even_from_cost_ratio(cost),
                num_requests_running_spec=_mean(point.num_requests_running_spec for point in own),
                num_requests_running_base=_mean(point.num_requests_running_base for point in own),
            )
        )
    return fits


class Schedule(BaseModel):
    """The part of vLLM's --speculative-config that sets k per batch size.

    ``num_speculative_tokens_per_batch_size`` is a list of inclusive ``[lo, hi, k]`` ranges that
    starts at batch size 1; vLLM keeps the last range's k for larger batches and caps every k
    at ``num_speculative_tokens`` (vllm/v1/spec_decode/dynamic/utils.py)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    num_speculative_tokens: int = Field(ge=1)
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]]

    def snippet(self) -> str:
        """The JSON to merge into ``--speculative-config``."""
        return json.dumps(self.model_dump(mode="json"))


def range_edges(concurrencies: Sequence[int]) -> list[tuple[int, int]]:
    """Batch-size ranges around sorted concurrencies, split at their geometric midpoints."""
    edges = []
    low = 1
    for here, after in itertools.pairwise(concurrencies):
        high = max(here, min(after - 1, math.floor(math.sqrt(here * after))))
        edges.append((low, high))
        low = high + 1
    edges.append((low, max(low, concurrencies[-1])))
    return edges


def best_k_per_concurrency(points: Sequence[CalibrationPoint]) -> dict[int, int]:
    """Per concurrency, the k with the lowest TPOT (mean over temperatures); 0: plain decoding.

    Only temperatures measured for every candidate count, so each candidate is averaged over
    the same loads. Ties go to the smaller k (less drafting for the same latency)."""
    best: dict[int, int] = {}
    for concurrency in sorted({point.concurrency for point in points}):
        own = [point for point in points if point.concurrency == concurrency]
        candidates = _tpot_by_k(own)
        if candidates:
            best[concurrency] = min(candidates, key=lambda k: (candidates[k], k))
    return best


def _tpot_by_k(points: Sequence[CalibrationPoint]) -> dict[int, float]:
    ks = {point.num_speculative_tokens for point in points}
    temperatures = [
        temperature
        for temperature in sorted(
            {point.temperature for point in points}, key=lambda t: (t is not None, t or 0.0)
        )
        if all(_tpot(points, k, temperature) is not None for k in ks)
        and _base_tpot(points, temperature) is not None
    ]
    if not temperatures:
        return {}
    means = {0: _mean(_base_tpot(points, t) for t in temperatures)}
    means.update((k, _mean(_tpot(points, k, t) for t in temperatures)) for k in ks)
    return {k: tpot for k, tpot in means.items() if tpot is not None}


def _tpot(points: Sequence[CalibrationPoint], k: int, temperature: float | None) -> float | None:
    return next(
        (
            p.tpot_spec_ms
            for p in points
            if p.num_speculative_tokens == k and p.temperature == temperature
        ),
        None,
    )


def _base_tpot(points: Sequence[CalibrationPoint], temperature: float | None) -> float | None:
    return _mean(p.tpot_base_ms for p in points if p.temperature == temperature)


def propose_schedule(points: Sequence[CalibrationPoint]) -> Schedule | None:
    """For each concurrency range, the k with the best measured TPOT (0 where plain wins)."""
    best = best_k_per_concurrency(points)
    if not best:
        return None
    concurrencies = sorted(best)
    ranges: list[tuple[int, int, int]] = []
    for (low, high), concurrency in zip(range_edges(concurrencies), concurrencies, strict=True):
        k = best[concurrency]
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], high, k)
        else:
            ranges.append((low, high, k))
    k_max = max(point.num_speculative_tokens for point in points)
    return Schedule(num_speculative_tokens=k_max, num_speculative_tokens_per_batch_size=ranges)


class ModelCalibration(BaseModel):
    """What run and check take from a calibration for one model."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    draft_cost_ratio: float
    break_even_acceptance_rate: float = Field(ge=0)


class Calibration(BaseModel):
    """The calibration file (`calibrate --json`); run and check read ``draft_cost_ratio``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: CalibrationKind = CALIBRATION_KIND
    model_name: str
    tpot_source: TpotSource = "client"
    assumed_draft_cost_ratio: float | None = None
    """The c the sidecar assumed before (flag or method default), for modelled_speedup."""
    num_speculative_tokens: list[int] = Field(default_factory=list)
    draft_cost_ratio: float
    """c of the highest concurrency measured: the conservative choice."""
    draft_cost_ratio_concurrency: int | None = None
    break_even_acceptance_rate: dict[int, float | None] = Field(default_factory=dict)
    """Per client concurrency, in the exported unit (accepted / draft tokens)."""
    concurrency_fits: list[ConcurrencyFit] = Field(default_factory=list)
    models: dict[str, ModelCalibration] = Field(default_factory=dict)
    points: list[CalibrationPoint] = Field(default_factory=list)
    schedule: Schedule | None = None

    @model_validator(mode="after")
    def _finite(self) -> Calibration:
        values = [self.draft_cost_ratio, *(m.draft_cost_ratio for m in self.models.values())]
        if not all(math.isfinite(value) for value in values):
            raise ValueError("draft_cost_ratio must be a finite number")
        return self

    def cost_ratio_for(self, model: str | None = None) -> float:
        """c for ``model``: its own entry when the file has one, else the top-level figure.

        Without a model name, a file with exactly one model entry gives that entry (a sidecar
        watches one vLLM, which serves one model). A negative fit counts as free drafting (0)."""
        if model is not None:
            entry = self.models.get(model)
        else:
            entry = next(iter(self.models.values())) if len(self.models) == 1 else None
        return max(0.0, entry.draft_cost_ratio if entry is not None else self.draft_cost_ratio)


class CalibrationError(ValueError):
    """No point could be fitted: no c to report. The message says why."""


def build_calibration(
    model_name: str,
    points: Sequence[CalibrationPoint],
    *,
    tpot_source: TpotSource,
    assumed_cost_ratio: float,
) -> Calibration:
    """Fits per concurrency; the top-level c is that of the highest concurrency fitted."""
    fits = fit_per_concurrency(points)
    fitted = [fit for fit in fits if fit.draft_cost_ratio is not None]
    if not fitted:
        raise CalibrationError("no point had both TPOTs and drafts: nothing to fit c to")
    top = fitted[-1]
    assert top.draft_cost_ratio is not None and top.break_even_acceptance_rate is not None
    return Calibration(
        model_name=model_name,
        tpot_source=tpot_source,
        assumed_draft_cost_ratio=assumed_cost_ratio,
        num_speculative_tokens=sorted({point.num_speculative_tokens for point in points}),
        draft_cost_ratio=top.draft_cost_ratio,
        draft_cost_ratio_concurrency=top.concurrency,
        break_even_acceptance_rate={
            fit.concurrency: fit.break_even_acceptance_rate for fit in fits
        },
        concurrency_fits=fits,
        models={
            model_name: ModelCalibration(
                draft_cost_ratio=top.draft_cost_ratio,
                break_even_acceptance_rate=top.break_even_acceptance_rate,
            )
        },
        points=list(points),
        schedule=propose_schedule(points),
    )

"""A cumulative Prometheus histogram's figures: count, mean and quantiles estimated as PromQL's
``histogram_quantile`` estimates them. Pure: no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specdec_exporter.core.acceptance import ratio
from specdec_exporter.core.values import finite_or_none

CumulativeBuckets = Sequence[tuple[float, float]]
"""(upper bound ``le``, cumulative count), ascending, the last one +Inf."""


@dataclass(frozen=True, slots=True)
class HistogramFigures:
    """What a table shows of one histogram: how many, the mean, the median and P90."""

    count: float
    mean: float | None
    p50: float | None
    p90: float | None


def figures(buckets: CumulativeBuckets, total: float) -> HistogramFigures:
    """``total``: the histogram's ``_sum``. A count that is no count (NaN, ±Inf, negative)
    shows as no observations, with no figures."""
    count = buckets[-1][1] if buckets else 0.0
    if not (math.isfinite(count) and count >= 0):
        return HistogramFigures(0.0, None, None, None)
    return HistogramFigures(
        count,
        ratio(total, count),
        quantile(0.5, buckets),
        quantile(0.9, buckets),
    )


def quantile(q: float, buckets: CumulativeBuckets) -> float | None:
    """As ``histogram_quantile``: linear interpolation inside the bucket the rank q·count falls
    in (the first bucket starts at 0); a rank in the +Inf bucket gives the highest finite bound.
    None without observations or without a finite bound."""
    count = buckets[-1][1] if buckets else 0.0
    if count <= 0 or not 0 <= q <= 1:
        return None
    rank = q * count
    lower_bound, lower_count = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return finite_or_none(lower_bound) if lower_bound > 0 or lower_count > 0 else None
            if bound <= 0 or cumulative == lower_count:
                return finite_or_none(bound)  # a NaN bound (le="NaN") is no figure
            return finite_or_none(
                lower_bound
                + (bound - lower_bound) * (rank - lower_count) / (cumulative - lower_count)
            )
        lower_bound, lower_count = bound, cumulative
    return None

"""Histogram figures as PromQL's histogram_quantile computes them, on literal buckets."""

from __future__ import annotations

import math

import pytest

from specdec_exporter.core.histogram import HistogramFigures, figures, quantile

INF = math.inf
# 10 observations: 2 at or below 0.1, 8 at or below 0.2, 10 at or below 0.4
BUCKETS = [(0.1, 2.0), (0.2, 8.0), (0.4, 10.0), (INF, 10.0)]


def test_quantiles_interpolate_inside_the_bucket_of_the_rank() -> None:
    # rank 5 lies in (0.1, 0.2] holding ranks 2..8: 0.1 + 0.1 * 3/6
    assert quantile(0.5, BUCKETS) == pytest.approx(0.15)
    # rank 9 lies in (0.2, 0.4] holding ranks 8..10: 0.2 + 0.2 * 1/2
    assert quantile(0.9, BUCKETS) == pytest.approx(0.3)
    # the first bucket starts at 0: rank 1 of 2 below 0.1
    assert quantile(0.1, BUCKETS) == pytest.approx(0.05)


def test_a_rank_in_the_inf_bucket_gives_the_highest_finite_bound() -> None:
    assert quantile(0.9, [(0.1, 1.0), (0.2, 2.0), (INF, 10.0)]) == 0.2


def test_no_observations_or_no_finite_bound_has_no_quantile() -> None:
    assert quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None
    assert quantile(0.5, []) is None
    assert quantile(0.5, [(INF, 3.0)]) is None


def test_figures_count_mean_p50_p90() -> None:
    assert figures(BUCKETS, 1.7) == HistogramFigures(
        10.0, pytest.approx(0.17), pytest.approx(0.15), pytest.approx(0.3)
    )
    assert figures([(0.1, 0.0), (INF, 0.0)], 0.0) == HistogramFigures(0.0, None, None, None)

"""The charts' ring buffer: one point per poll, bounded in points and in series."""

from __future__ import annotations

import pytest

from specdec_exporter.sidecar.history import MAX_POINTS, AcceptanceHistory


def test_capacity_is_one_point_per_poll_over_15_minutes_with_an_absolute_cap() -> None:
    assert AcceptanceHistory(interval=5).capacity == 181
    assert AcceptanceHistory(interval=0.2).capacity == MAX_POINTS == 720
    assert AcceptanceHistory(interval=3600).capacity == 2
    assert AcceptanceHistory().capacity == MAX_POINTS


def test_a_long_run_keeps_only_the_ring() -> None:
    history = AcceptanceHistory(interval=5)
    for poll in range(10_000):
        history.record(5.0 * poll, {("m", None): poll / 10_000, ("m", "0"): 0.5})
    assert len(history) == 181
    (model, bucket) = history.series()
    assert model.points[0] == (900.0, 0.9819) and model.points[-1] == (0.0, 0.9999)
    assert len(bucket.points) == 181


def test_fast_polls_hit_the_absolute_cap_before_15_minutes() -> None:
    history = AcceptanceHistory(interval=0.2)
    for poll in range(1000):
        history.record(0.2 * poll, {("m", None): 0.5})
    assert len(history) == 720
    (model,) = history.series()
    assert len(model.points) == 720 and model.points[0][0] == pytest.approx(143.8)
    assert history.seconds() == pytest.approx(143.8)


def test_points_older_than_the_span_go_even_when_polls_were_slow() -> None:
    history = AcceptanceHistory(interval=1)
    for at in (0.0, 100.0, 500.0, 950.0, 1000.0):  # the first is 1000 s old at the end
        history.record(at, {("m", None): at / 1000})
    (model,) = history.series()
    assert model.points == ((900.0, 0.1), (500.0, 0.5), (50.0, 0.95), (0.0, 1.0))


def test_every_series_gets_a_point_per_poll_and_empty_series_are_dropped() -> None:
    history = AcceptanceHistory(interval=1, span=3)
    history.record(0.0, {("m", None): 0.5})
    history.record(1.0, {("m", "0"): 0.25})  # the model had no figure; the bucket appears
    history.record(2.0, {})  # a failed poll
    model, bucket = history.series()
    assert model.points == ((2.0, 0.5), (1.0, None), (0.0, None))
    assert bucket.points == ((2.0, None), (1.0, 0.25), (0.0, None))
    assert bucket.latest is None
    for at in (3.0, 4.0):
        history.record(at, {("m", "0"): 0.75})
    assert [(s.temperature_bucket, s.latest) for s in history.series()] == [("0", 0.75)]


def test_series_are_capped() -> None:
    history = AcceptanceHistory(interval=1, max_series=3)
    history.record(0.0, {("m", str(bucket)): 0.5 for bucket in range(10)})
    assert [s.temperature_bucket for s in history.series()] == ["0", "1", "2"]

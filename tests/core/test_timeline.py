"""The poll timeline: windows, resets and pruning, with literal numbers."""

from __future__ import annotations

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.timeline import Timeline


def counts(drafts: float) -> Totals:
    return Totals(drafts=drafts, draft_tokens=4 * drafts)


def test_no_window_before_two_polls() -> None:
    timeline: Timeline[str] = Timeline(60)
    timeline.observe(0.0, {"a": counts(10)})
    assert timeline.window().deltas == {}


def test_window_is_latest_minus_oldest_kept() -> None:
    timeline: Timeline[str] = Timeline(10)
    for at, drafts in [(0, 100), (5, 110), (10, 130), (15, 160)]:
        timeline.observe(at, {"a": counts(drafts)})
    window = timeline.window()
    assert window.seconds == 10
    assert window.deltas == {"a": counts(50)}


def test_reset_inside_the_window_is_never_negative() -> None:
    timeline: Timeline[str] = Timeline(60)
    for at, drafts in [(0, 100), (5, 120), (10, 3), (15, 9)]:
        timeline.observe(at, {"a": counts(drafts)})
    assert timeline.window().deltas == {"a": counts(20 + 3 + 6)}


def test_a_series_first_seen_later_starts_at_zero() -> None:
    timeline: Timeline[str] = Timeline(60)
    timeline.observe(0, {"a": counts(1)})
    timeline.observe(5, {"a": counts(2), "b": counts(500)})
    timeline.observe(10, {"a": counts(3), "b": counts(510)})
    assert timeline.window().deltas == {"a": counts(2), "b": counts(10)}


def test_own_counters_first_seen_later_count_whole() -> None:
    """The tap's series are created at zero: one born between two polls counts from zero, but
    what a series held at the very first poll predates the window."""
    timeline: Timeline[str] = Timeline(60, counts_from_zero=True)
    timeline.observe(0, {"a": counts(1)})
    timeline.observe(5, {"a": counts(2), "b": counts(7)})
    timeline.observe(10, {"a": counts(3), "b": counts(9)})
    assert timeline.window().deltas == {"a": counts(2), "b": counts(9)}


def test_points_older_than_the_window_are_dropped() -> None:
    timeline: Timeline[str] = Timeline(10)
    for at in range(0, 1000, 5):
        timeline.observe(at, {"a": counts(at)})
    assert len(timeline) == 3


def test_a_series_absent_for_a_whole_window_is_forgotten() -> None:
    timeline: Timeline[str] = Timeline(10)
    timeline.observe(0, {"a": counts(1), "gone": counts(7)})
    timeline.observe(5, {"a": counts(2), "gone": counts(9)})
    timeline.observe(10, {"a": counts(3)})
    assert timeline.window().deltas == {"a": counts(2), "gone": counts(2)}
    timeline.observe(15, {"a": counts(4)})  # last seen at 5: a whole window ago
    assert timeline.window().deltas == {"a": counts(2)}
    timeline.observe(20, {"a": counts(5), "gone": counts(100)})  # back: starts at zero
    timeline.observe(25, {"a": counts(6), "gone": counts(103)})
    assert timeline.window().deltas == {"a": counts(2), "gone": counts(3)}

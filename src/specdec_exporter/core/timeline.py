"""The poll timeline: reset-corrected running totals per series, kept for one window.

Pure (the caller passes the clock). Each poll adds a point; the window's counts are the latest
point minus the newest point at least ``window`` seconds older (or the oldest one kept). A series
absent for a whole window is forgotten, so the keys kept follow what vLLM shows now; one whose
running total would overflow (counters near 1.8e308 that keep resetting) starts again at zero.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from specdec_exporter.core.acceptance import Totals, totals_delta

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Window(Generic[K]):
    """Counts per series over ``seconds`` (the span actually covered, at most the window)."""

    seconds: float
    deltas: dict[K, Totals]


class Timeline(Generic[K]):
    """Running totals that never go down across counter resets, sampled at each poll.

    ``counts_from_zero``: the counters are the sidecar's own (the tap's), created at zero, so a
    series that appears after the first poll was born since the previous poll and counts whole.
    """

    def __init__(self, window: float, *, counts_from_zero: bool = False) -> None:
        self._window = window
        self._counts_from_zero = counts_from_zero
        self._last_raw: dict[K, Totals] = {}
        self._corrected: dict[K, Totals] = {}
        self._seen_at: dict[K, float] = {}
        self._points: deque[tuple[float, dict[K, Totals]]] = deque()

    def observe(self, at: float, raw: Mapping[K, Totals]) -> None:
        """Record one poll's cumulative counts at time ``at`` (seconds, any monotonic clock)."""
        for key, totals in raw.items():
            previous = self._last_raw.get(key)
            if previous is not None:
                step = totals_delta(previous, totals)
            elif self._counts_from_zero and self._points:
                step = totals
            else:
                # A series first seen starts the window at zero: its history before we saw it is
                # not part of any window we can measure.
                step = Totals()
            corrected = self._corrected.get(key, Totals()) + step
            if not corrected.is_finite():  # a counter near 1.8e308 that resets overflows the sum
                self._drop_points_of(key)
                corrected = Totals()
            self._corrected[key] = corrected
            self._last_raw[key] = totals
            self._seen_at[key] = at
        self._forget(at)
        self._points.append((at, dict(self._corrected)))
        self._prune()

    def _forget(self, at: float) -> None:
        """Drop the series absent for a whole window; they have no count left to give."""
        gone = [key for key, seen in self._seen_at.items() if seen <= at - self._window]
        for key in gone:
            del self._last_raw[key], self._corrected[key], self._seen_at[key]
            self._drop_points_of(key)

    def _drop_points_of(self, key: K) -> None:
        """Forget ``key``'s running totals in every point kept: its window starts again."""
        for _, point in self._points:
            point.pop(key, None)

    def _prune(self) -> None:
        latest = self._points[-1][0]
        while len(self._points) > 1 and self._points[1][0] <= latest - self._window:
            self._points.popleft()

    def window(self) -> Window[K]:
        """Counts over the window ending at the latest poll (empty before two polls)."""
        if len(self._points) < 2:
            return Window(0.0, {})
        (start, base), (end, latest) = self._points[0], self._points[-1]
        deltas = {key: totals - base.get(key, Totals()) for key, totals in latest.items()}
        return Window(end - start, deltas)

    def __len__(self) -> int:
        return len(self._points)

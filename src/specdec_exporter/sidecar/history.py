"""Acceptance per model and per temperature bucket over the last minutes, for the page's charts.

A fixed-size ring of one point per poll: memory is bounded by series x points, never by traffic.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

HISTORY_SECONDS = 900.0
"""What the charts cover: the last 15 minutes."""
MAX_POINTS = 720
"""Absolute cap on points per series, whatever the poll interval (one per poll otherwise)."""
MAX_SERIES = 256
"""Cap on series kept; models and buckets are bounded upstream, this guards the page's size."""

SeriesId = tuple[str, str | None]
"""(model_name, temperature_bucket); bucket None: the model's own figure (vLLM's counters)."""


@dataclass(frozen=True, slots=True)
class Series:
    """One line of a chart: (seconds before the latest poll, value; None: a gap), oldest first."""

    model_name: str
    temperature_bucket: str | None
    points: tuple[tuple[float, float | None], ...]

    @property
    def latest(self) -> float | None:
        return self.points[-1][1] if self.points else None


class AcceptanceHistory:
    """One value per series per poll, for the last ``span`` seconds.

    Every series gets a point at every poll (None where it has no figure, or the poll failed), so
    the series share one time axis and a gap shows as a break in the line. A series whose points
    are all None is dropped.
    """

    def __init__(
        self,
        interval: float | None = None,
        span: float = HISTORY_SECONDS,
        max_points: int = MAX_POINTS,
        max_series: int = MAX_SERIES,
    ) -> None:
        per_poll = max_points if interval is None else math.ceil(span / interval) + 1
        self.span = span
        self.capacity = max(2, min(max_points, per_poll))
        self._max_series = max_series
        self._times: deque[float] = deque(maxlen=self.capacity)
        self._values: dict[SeriesId, deque[float | None]] = {}
        self._lock = threading.Lock()

    def record(self, at: float, values: Mapping[SeriesId, float | None]) -> None:
        """One poll at ``at`` (seconds, poller's clock); ``{}`` records a gap in every series."""
        with self._lock:
            self._times.append(at)
            for series_id, ring in self._values.items():
                ring.append(values.get(series_id))
            for series_id, value in values.items():
                if series_id not in self._values and value is not None:
                    if len(self._values) >= self._max_series:
                        continue
                    ring = deque([None] * (len(self._times) - 1), maxlen=self.capacity)
                    ring.append(value)
                    self._values[series_id] = ring
            self._prune(at)

    def _prune(self, at: float) -> None:
        while self._times and self._times[0] < at - self.span:
            self._times.popleft()
            for ring in self._values.values():
                ring.popleft()
        for series_id in [
            key for key, ring in self._values.items() if all(value is None for value in ring)
        ]:
            del self._values[series_id]

    def series(self) -> list[Series]:
        """Every series, in order of first appearance, with ages relative to the latest poll."""
        with self._lock:
            if not self._times:
                return []
            latest = self._times[-1]
            ages = [latest - at for at in self._times]
            return [
                Series(model, bucket, tuple(zip(ages, ring, strict=True)))
                for (model, bucket), ring in self._values.items()
            ]

    def seconds(self) -> float:
        """The time the kept polls cover (less than ``span`` in the first minutes)."""
        with self._lock:
            return self._times[-1] - self._times[0] if self._times else 0.0

    def __len__(self) -> int:
        return len(self._times)

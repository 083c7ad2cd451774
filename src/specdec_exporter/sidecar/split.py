"""Where the temperature split comes from (the engine probe, the request tap, or nothing), and the
window counts of the split and of the probe's running-batch buckets, poll by poll.

The probe wins whenever the last successful poll of vLLM showed it with its temperature split on:
it counts every sequence inside vLLM, the tap only what passes through it. Meanwhile the tap keeps
proxying and counting, but its split is not exported; when the probe goes away (vLLM restarted
without it), the tap's counts start again from zero, so nothing the probe counted is counted again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.batch_report import BatchKey
from specdec_exporter.core.probe_parse import ProbeSnapshot
from specdec_exporter.core.report import BucketKey
from specdec_exporter.core.timeline import Timeline, Window

SplitSource = Literal["probe", "tap", "none"]
SPLIT_SOURCES: tuple[SplitSource, ...] = ("probe", "tap", "none")

TapCounts = Callable[[], Mapping[BucketKey, Totals]]
"""The request tap's cumulative attributed counts (drafts, draft and accepted tokens) per bucket."""


class SplitWindows:
    """The split's source and its window counts (a new window when the source changes)."""

    def __init__(
        self,
        window: float,
        tap_counts: TapCounts | None = None,
        tap_reset: Callable[[], None] | None = None,
    ) -> None:
        self._window = window
        self._tap_counts = tap_counts
        self._tap_reset = tap_reset
        self.source: SplitSource = "none"
        """Decided at each successful poll; kept while vLLM is unreachable."""
        self._split: Timeline[BucketKey] = Timeline(window, counts_from_zero=True)
        self._batch: Timeline[BatchKey] = Timeline(window, counts_from_zero=True)

    def choose(self, probe: ProbeSnapshot) -> SplitSource:
        if probe.temperature_split:
            return "probe"
        return "tap" if self._tap_counts is not None else "none"

    def observe(self, now: float, probe: ProbeSnapshot) -> Window[BucketKey]:
        """Fold in one successful poll; the split's window counts per (model, bucket).

        Counts from zero: the probe's and the tap's series are born at zero (with vLLM's start,
        or the sidecar's), so one first seen between two polls counts whole."""
        source = self.choose(probe)
        if source != self.source:
            if self.source == "probe" and self._tap_reset is not None:
                self._tap_reset()
            self._split = Timeline(self._window, counts_from_zero=True)
            self.source = source
        self._batch.observe(now, probe.batch)
        # Read even while the probe is the source: the read also keeps the tap's series bounded.
        tap = None if self._tap_counts is None else self._tap_counts()
        if source == "none":
            return Window(0.0, {})
        counts: Mapping[BucketKey, Totals] = (
            {key: bucket.totals for key, bucket in probe.temperature.items()}
            if source == "probe" or tap is None
            else tap
        )
        self._split.observe(now, counts)
        return self._split.window()

    def batch_window(self) -> Window[BatchKey]:
        return self._batch.window()

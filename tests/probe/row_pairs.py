"""The same finished sequences counted twice: through a ``SequenceRow`` and through
prometheus_client's own ``inc`` and ``observe`` on another model's series, so a test can compare
the two (in this process, and under PROMETHEUS_MULTIPROC_DIR in a child)."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_exporter.probe import counting
from specdec_exporter.probe.families import SequenceRow, TemperatureSeries

AMOUNTS = (0.0, 0.001, 0.1, 0.10000001, 0.5, 0.7, 1.0, 2.5, 5.0, 5.1, 60.0, 1e9)
"""TTFTs (TPOT: a seventh of each): at bucket bounds, between, below and above them."""


def count_both(row: SequenceRow, series: TemperatureSeries, amounts: Sequence[float]) -> None:
    """A sequence a timing in ``amounts`` (k = 2, figures varying with its index), then one
    without figures or timing, into ``row`` and, one by one, into ``series``."""
    for index, amount in enumerate(amounts):
        histogram = [index % 3, 1, index % 2] if index else [0, 0, 0]
        figures, rate = counting.sequence_figures(histogram, 2 * sum(histogram) - index % 2, 2)
        timing = (amount, amount / 7)
        row.count(figures, rate, timing)
        series.sequences.inc()
        series.spec_sequences.inc()
        drafts, draft_tokens, accepted_tokens, *per_position = figures
        series.drafts.inc(drafts)
        series.draft_tokens.inc(draft_tokens)
        series.accepted_tokens.inc(accepted_tokens)
        for position, accepted in enumerate(per_position):
            series.accepted_per_position[position].inc(accepted)
        if rate is not None:
            series.acceptance_rate.observe(rate)
        series.ttft.observe(timing[0])
        series.tpot.observe(timing[1])
    row.count(None)
    series.sequences.inc()

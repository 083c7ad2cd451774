"""`check`'s tables of the two splits, literal rows."""

from __future__ import annotations

from probe_text import probe_text
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.batch_report import BatchEntry
from specdec_exporter.core.calibration import Schedule
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.core.report import entry
from specdec_exporter.core.verdict import DEFAULT_CRITERIA
from specdec_exporter.sidecar.split_report import batch_table, batch_window, probe_bucket_counts
from specdec_exporter.sidecar.tap_counters import BucketCounts
from variants import MODEL

SCHEDULE = Schedule(num_speculative_tokens=4, num_speculative_tokens_per_batch_size=[(1, 4, 4)])


def row(stale: bool | None) -> BatchEntry:
    made = entry(
        "m",
        "0",
        Totals(100, 400, 100, steps=50),
        seconds=10.0,
        enabled=True,
        k=4,
        cost=DraftCost(0.2, "calibration"),
        criteria=DEFAULT_CRITERIA,
    )
    return BatchEntry("2-4", 50, made, 8, 0.5, (4, 2), stale)


def test_the_probe_counts_become_the_tap_rows_type() -> None:
    counts = probe_bucket_counts(parse_probe(probe_text()))
    assert counts[(MODEL, "0")] == BucketCounts(
        Totals(20.0, 80.0, 63.0, (17.0, 16.0, 15.0, 15.0)), requests=2.0, attributed=2.0
    )


def test_batch_window_counts_new_series_whole_and_differences_the_rest() -> None:
    before, after = parse_probe(probe_text()), parse_probe(probe_text(rounds=2))
    window = batch_window(before, after, 10.0)
    assert window.deltas[(MODEL, "0", "2-4")] == Totals(3.0, 12.0, 6.0, steps=1.0)
    assert batch_window(parse_probe(""), after, 10.0).deltas[(MODEL, "0", "1")].steps == 2.0


def test_batch_table_shows_the_schedule_the_stale_flag_and_the_caveat() -> None:
    text = batch_table([row(True)], SCHEDULE)
    assert "Acceptance by running-batch bucket" in text
    assert "2-4" in text and "4,2" in text and "STALE" in text
    assert '"num_speculative_tokens_per_batch_size": [[1, 4, 4]]' in text
    assert "run calibrate again" in text
    assert "concurrency is not batch size" in text
    fresh = batch_table([row(False)], None)
    assert "run calibrate again" not in fresh and "proposed schedule" not in fresh

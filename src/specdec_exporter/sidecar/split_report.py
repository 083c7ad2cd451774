"""`check`'s view of the two splits: the probe's per-bucket counts in the tap's row type, and the
per-batch-bucket table beside calibrate's proposed schedule."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_exporter.core.batch_report import (
    CONCURRENCY_IS_NOT_BATCH_SIZE,
    STALE_TOLERANCE,
    BatchEntry,
    BatchKey,
)
from specdec_exporter.core.calibration import Schedule
from specdec_exporter.core.probe_parse import ProbeSnapshot
from specdec_exporter.core.report import BucketKey
from specdec_exporter.core.timeline import Timeline, Window
from specdec_exporter.sidecar.split import SplitSource
from specdec_exporter.sidecar.tap_counters import TAP_TITLE, BucketCounts
from specdec_exporter.term import render_table

SPLIT_TITLES: dict[SplitSource, str] = {
    "probe": "Acceptance by temperature bucket (engine probe, same window; requests = finished "
    "sequences, attributed = with speculative figures)",
    "tap": TAP_TITLE,
    "none": "No temperature split: neither the engine probe nor a request tap (--sidecar-url)",
}


def probe_bucket_counts(probe: ProbeSnapshot) -> dict[BucketKey, BucketCounts]:
    """The probe's cumulative counts per (model, temperature bucket), as the tap's row type:
    requests are finished sequences, attributed those with speculative figures."""
    return {
        key: BucketCounts(bucket.totals, bucket.sequences, bucket.spec_sequences)
        for key, bucket in probe.temperature.items()
    }


def batch_window(before: ProbeSnapshot, after: ProbeSnapshot, seconds: float) -> Window[BatchKey]:
    """The probe's batch-bucket counts between two scrapes (resets and new series handled as
    the sidecar's timeline does)."""
    timeline: Timeline[BatchKey] = Timeline(seconds, counts_from_zero=True)
    timeline.observe(0.0, before.batch)
    timeline.observe(seconds, after.batch)
    return timeline.window()


def batch_table(rows: Sequence[BatchEntry], schedule: Schedule | None) -> str:
    headers = (
        "model",
        "engine",
        "batch",
        "steps",
        "acceptance",
        "mean len",
        "speedup*",
        "c",
        "calibrated at",
        "calib. acceptance",
        "proposed k",
        "proposal",
    )
    body = [
        (
            row.entry.model_name,
            row.entry.engine,
            row.batch_bucket,
            None if row.steps is None else int(row.steps),
            row.entry.acceptance_rate,
            row.entry.mean_acceptance_length,
            row.entry.estimated_speedup,
            row.entry.draft_cost_ratio,
            "-" if row.calibration_concurrency is None else f"{row.calibration_concurrency}",
            row.calibration_acceptance_rate,
            ",".join(map(str, row.proposed_num_speculative_tokens)) or "-",
            {True: "STALE", False: "ok", None: "-"}[row.proposal_stale],
        )
        for row in rows
    ]
    lines = [
        "Acceptance by running-batch bucket (engine probe, same window)",
        render_table(headers, body),
    ]
    if schedule is not None:
        lines.append(f"calibrate's proposed schedule: {schedule.snippet()}")
    if any(row.proposal_stale for row in rows):
        lines.append(
            f"STALE: live acceptance moved more than {STALE_TOLERANCE:g} from the calibration "
            f"run's at the nearest concurrency: run calibrate again before using its schedule"
        )
    lines.append(f"note: {CONCURRENCY_IS_NOT_BATCH_SIZE}")
    return "\n".join(lines)

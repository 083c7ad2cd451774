"""Acceptance per running-batch bucket beside a calibration, literal numbers."""

from __future__ import annotations

import pytest

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.batch_report import (
    STALE_MIN_DRAFT_TOKENS,
    STALE_TOLERANCE,
    BatchRange,
    batch_entries,
    batch_range,
    is_stale,
    nearest_fit,
    proposed_ks,
)
from specdec_exporter.core.buckets import BatchBuckets
from specdec_exporter.core.calibration import (
    Calibration,
    CalibrationPoint,
    ConcurrencyFit,
    Schedule,
)
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import Snapshot
from specdec_exporter.core.verdict import DEFAULT_CRITERIA

MODEL_K4 = Snapshot(
    True,
    {("m", "0"): Totals(accepted_per_position=(0.0,) * 4)},
    spec_series=frozenset({("m", "0")}),
)


def fit(concurrency: int, cost: float | None) -> ConcurrencyFit:
    return ConcurrencyFit(
        concurrency=concurrency,
        draft_cost_ratio=cost,
        break_even_acceptance_rate=None if cost is None else max(0.0, cost),
    )


def cal_point(concurrency: int, k: int, draft_tokens: float, accepted: float) -> CalibrationPoint:
    return CalibrationPoint(
        concurrency=concurrency,
        temperature=0.0,
        num_speculative_tokens=k,
        drafts=draft_tokens / k,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        acceptance_rate=accepted / draft_tokens,
        mean_acceptance_length=None,
        tpot_spec_ms=None,
        tpot_base_ms=None,
        measured_speedup=None,
        modelled_speedup=None,
        draft_cost_ratio=None,
        requests_spec=1,
        requests_base=1,
    )


CALIBRATION = Calibration(
    model_name="m",
    draft_cost_ratio=0.4,
    concurrency_fits=[fit(1, 0.05), fit(8, 0.2), fit(32, None), fit(64, 0.4)],
    points=[
        cal_point(1, 4, 400, 300),
        cal_point(1, 2, 200, 180),
        cal_point(8, 4, 400, 200),
        cal_point(64, 4, 400, 100),
    ],
    schedule=Schedule(
        num_speculative_tokens=4,
        num_speculative_tokens_per_batch_size=[(1, 2, 4), (3, 22, 2), (23, 64, 0)],
    ),
)


def test_every_default_label_names_its_range() -> None:
    ranges = [batch_range(label) for label in BatchBuckets().labels]
    assert ranges == [
        BatchRange(1, 1),
        BatchRange(2, 4),
        BatchRange(5, 8),
        BatchRange(9, 16),
        BatchRange(17, 32),
        BatchRange(33, 64),
        BatchRange(65, None),
    ]
    assert batch_range("lots") is None and batch_range("2-x") is None
    assert BatchRange(2, 8).representative == 4.0 and BatchRange(65, None).representative == 65


def test_nearest_concurrency_by_ratio_skipping_unfitted_ties_to_the_higher() -> None:
    fits = CALIBRATION.concurrency_fits
    assert [
        nearest_fit(fits, BatchRange(low, high)) for low, high in ((1, 1), (2, 4), (17, 32))
    ] == [
        fits[0],
        fits[1],  # 2..4: middle 2.83, as far from 1 as from 8 by ratio: the higher wins
        fits[3],  # 17..32 (middle 23.3): 32 has no fit; 64 is 2.7x away, 8 is 2.9x
    ]
    assert nearest_fit([fit(2, 0.1), fit(8, 0.3)], BatchRange(4, 4)) == fit(8, 0.3)
    assert nearest_fit([fit(4, None)], BatchRange(4, 4)) is None


def test_proposed_ks_over_a_bucket_in_order_of_size() -> None:
    schedule = CALIBRATION.schedule
    assert schedule is not None
    assert proposed_ks(schedule, BatchRange(1, 1)) == [4]
    assert proposed_ks(schedule, BatchRange(2, 4)) == [4, 2]
    assert proposed_ks(schedule, BatchRange(17, 32)) == [2, 0]
    assert proposed_ks(schedule, BatchRange(65, None)) == [0]  # beyond the last range: its k


@pytest.mark.parametrize(
    ("accepted", "stale"),
    [(250.0, False), (250.0 + 400 * STALE_TOLERANCE * 0.9, False), (300.0, True), (180.0, True)],
)
def test_stale_beyond_the_tolerance(accepted: float, stale: bool) -> None:
    assert is_stale(Totals(100, 400, accepted), 0.625) is stale


def test_stale_needs_enough_draft_tokens_and_a_calibration_figure() -> None:
    few = STALE_MIN_DRAFT_TOKENS - 1
    assert is_stale(Totals(10, few, 0), 0.9) is None
    assert is_stale(Totals(100, 400, 0), None) is None


def test_rows_use_the_nearest_concurrency_for_c_and_acceptance_in_order() -> None:
    deltas = {
        ("m", "0", "33-64"): Totals(30, 120 * 10, 30 * 10, steps=3),
        ("m", "0", "1"): Totals(100, 400, 300, steps=100),
        ("m", "0", "2-4"): Totals(100, 400, 100, steps=40),
    }
    rows = batch_entries(
        MODEL_K4,
        deltas,
        seconds=10.0,
        cost=DraftCost(0.4, "calibration"),
        criteria=DEFAULT_CRITERIA,
        calibration=CALIBRATION,
    )
    assert [row.batch_bucket for row in rows] == ["1", "2-4", "33-64"]
    one, small, large = rows
    assert one.entry.draft_cost_ratio == 0.05 and one.calibration_concurrency == 1
    assert one.calibration_acceptance_rate == 0.75  # k = 4 points only (not the k = 2 one)
    assert one.entry.estimated_speedup == 4.0 / 1.2 and one.proposal_stale is False
    assert small.calibration_concurrency == 8 and small.entry.draft_cost_ratio == 0.2
    assert small.proposal_stale is True  # 0.25 live against 0.5 calibrated
    assert large.calibration_concurrency == 64 and large.proposed_num_speculative_tokens == (0,)
    assert one.as_json() == {
        "model_name": "m",
        "engine": "0",
        "batch_bucket": "1",
        "steps": 100,
        "acceptance_rate": 0.75,
        "mean_acceptance_length": 4.0,
        "drafts": 100,
        "draft_tokens": 400,
        "accepted_tokens": 300,
        "drafts_per_second": 10.0,
        "estimated_speedup": 4.0 / 1.2,
        "break_even_acceptance_rate": 0.05,
        "threshold": DEFAULT_CRITERIA.threshold,
        "draft_cost_ratio": 0.05,
        "draft_cost_ratio_source": "calibration",
        "verdict": "healthy",
        "calibration_concurrency": 1,
        "calibration_acceptance_rate": 0.75,
        "proposed_num_speculative_tokens": [4],
        "proposal_stale": False,
    }


def test_without_a_calibration_c_is_the_model_rows_one() -> None:
    [row] = batch_entries(
        MODEL_K4,
        {("m", "0", "1"): Totals(100, 400, 300, steps=100)},
        seconds=10.0,
        cost=DraftCost(0.1, "default"),
        criteria=DEFAULT_CRITERIA,
    )
    assert row.entry.draft_cost_ratio == 0.1 and row.calibration_concurrency is None
    assert row.proposal_stale is None and row.proposed_num_speculative_tokens == ()

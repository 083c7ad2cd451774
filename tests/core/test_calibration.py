"""The calibration maths with literal numbers: fitted c, fits per concurrency, the k schedule."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.calibration import (
    Calibration,
    CalibrationError,
    CalibrationPoint,
    PhaseTiming,
    Schedule,
    break_even_from_cost_ratio,
    build_calibration,
    fit_per_concurrency,
    fitted_draft_cost_ratio,
    make_point,
    measured_speedup,
    propose_schedule,
    range_edges,
)
from specdec_exporter.core.model import modelled_speedup as estimated_speedup
from specdec_exporter.core.parse import requests_running
from variants import V033

COUNTS = Totals(drafts=100, draft_tokens=400, accepted_tokens=200)
"""a = 200 / 400 = 0.5, L = 1 + 200 / 100 = 3.0, every draft 4 tokens long."""


def point(
    concurrency: int,
    temperature: float | None,
    *,
    k: int = 4,
    spec_ms: float | None = 2.0,
    base_ms: float | None = 3.0,
    counts: Totals = COUNTS,
    running: tuple[float | None, float | None] = (None, None),
) -> CalibrationPoint:
    return make_point(
        concurrency=concurrency,
        temperature=temperature,
        k=k,
        counts=counts,
        spec=PhaseTiming(spec_ms, 8, running[0]),
        base=PhaseTiming(base_ms, 8, running[1]),
        assumed_cost_ratio=0.1,
    )


def test_fitted_c_solves_the_speedup_model() -> None:
    assert measured_speedup(3.0, 2.0) == 1.5
    assert fitted_draft_cost_ratio(3.0, 4, 1.5) == 0.25
    assert estimated_speedup(3.0, 4, 0.25) == 1.5
    # the real-vLLM figures that motivated calibrate: L 3.62, k 4, TPOT ratios 0.93 and 0.56
    assert fitted_draft_cost_ratio(3.62, 4, 0.93) == pytest.approx(0.7231, abs=1e-4)
    assert fitted_draft_cost_ratio(3.62, 4, 0.56) == pytest.approx(1.3661, abs=1e-4)
    assert fitted_draft_cost_ratio(3.0, 4, 4.0) == -0.0625  # faster than L: drafting looked free


def test_break_even_is_c_in_the_exported_unit() -> None:
    assert break_even_from_cost_ratio(0.25) == 0.25
    assert break_even_from_cost_ratio(1.3) == 1.3
    assert break_even_from_cost_ratio(-0.0625) == 0.0
    k, cost = 4, 0.25
    at_break_even = break_even_from_cost_ratio(cost)
    mean_length = 1.0 + k * at_break_even  # every draft k long: L = 1 + k·a
    assert estimated_speedup(mean_length, k, cost) == 1.0


def test_point_figures() -> None:
    measured = point(8, 0.7, running=(7.5, 8.0))
    assert (measured.acceptance_rate, measured.mean_acceptance_length) == (0.5, 3.0)
    assert (measured.drafts, measured.draft_tokens, measured.accepted_tokens) == (100, 400, 200)
    assert measured.measured_speedup == 1.5
    assert measured.draft_cost_ratio == 0.25
    assert measured.modelled_speedup == 3.0 / 1.4  # with the assumed c = 0.1
    assert (measured.num_requests_running_spec, measured.num_requests_running_base) == (7.5, 8.0)
    assert (measured.requests_spec, measured.requests_base) == (8, 8)


def test_point_without_a_tpot_or_drafts_has_no_fit() -> None:
    no_base = point(1, 0.0, base_ms=None)
    assert no_base.measured_speedup is None and no_base.draft_cost_ratio is None
    assert no_base.modelled_speedup == 3.0 / 1.4
    no_drafts = point(1, 0.0, counts=Totals())
    assert no_drafts.measured_speedup == 1.5
    assert no_drafts.acceptance_rate is None and no_drafts.draft_cost_ratio is None


def test_fit_per_concurrency_is_the_mean_over_temperatures() -> None:
    points = [
        point(8, 0.0, spec_ms=2.0, running=(7.0, 8.0)),  # c = 0.25
        point(8, 1.0, spec_ms=2.4, running=(8.0, None)),  # s = 1.25, c = 0.35
        point(1, 0.0, spec_ms=1.5, base_ms=3.0),  # s = 2, c = 0.125
        point(1, 1.0, base_ms=None),
    ]  # not fitted: left out
    fits = fit_per_concurrency(points)
    assert [fit.concurrency for fit in fits] == [1, 8]
    assert fits[0].draft_cost_ratio == 0.125
    assert fits[1].draft_cost_ratio == pytest.approx(0.3, abs=1e-12)
    assert fits[1].break_even_acceptance_rate == fits[1].draft_cost_ratio
    assert (fits[1].num_requests_running_spec, fits[1].num_requests_running_base) == (7.5, 8.0)


def test_top_level_c_is_the_highest_concurrency_fitted() -> None:
    points = [point(1, 0.0, spec_ms=1.5), point(8, 0.0, spec_ms=2.4), point(32, 0.0, base_ms=None)]
    calibration = build_calibration("m", points, tpot_source="client", assumed_cost_ratio=0.1)
    assert calibration.draft_cost_ratio == pytest.approx(0.35)
    assert calibration.draft_cost_ratio_concurrency == 8
    assert calibration.break_even_acceptance_rate == {1: 0.125, 8: pytest.approx(0.35), 32: None}
    assert calibration.models["m"].draft_cost_ratio == calibration.draft_cost_ratio
    assert calibration.num_speculative_tokens == [4]
    with pytest.raises(CalibrationError):
        build_calibration(
            "m", [point(1, 0.0, base_ms=None)], tpot_source="client", assumed_cost_ratio=0.1
        )


def test_range_edges_split_at_geometric_midpoints() -> None:
    assert range_edges([1, 8, 32]) == [(1, 2), (3, 16), (17, 32)]
    assert range_edges([1, 2]) == [(1, 1), (2, 2)]
    assert range_edges([4]) == [(1, 4)]
    assert range_edges([2, 64]) == [(1, 11), (12, 64)]


def test_schedule_takes_the_best_tpot_and_zero_where_plain_wins() -> None:
    points = [
        point(1, 0.0, k=2, spec_ms=1.2, base_ms=2.0),
        point(1, 0.0, k=4, spec_ms=1.0, base_ms=2.0),
        point(1, 1.0, k=2, spec_ms=1.6, base_ms=2.0),
        point(1, 1.0, k=4, spec_ms=1.9, base_ms=2.0),
        point(8, 0.0, k=2, spec_ms=2.0, base_ms=2.4),
        point(8, 0.0, k=4, spec_ms=2.2, base_ms=2.4),
        point(32, 0.0, k=2, spec_ms=3.1, base_ms=3.0),
        point(32, 0.0, k=4, spec_ms=4.0, base_ms=3.0),
    ]
    schedule = propose_schedule(points)
    # concurrency 1: k=2 averages 1.4 ms, k=4 1.45 ms, plain 2.0 ms -> 2
    assert schedule == Schedule(
        num_speculative_tokens=4, num_speculative_tokens_per_batch_size=[(1, 16, 2), (17, 32, 0)]
    )
    assert json.loads(schedule.snippet()) == {
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 16, 2], [17, 32, 0]],
    }


def test_schedule_ties_go_to_the_smaller_k_and_missing_tpots_are_skipped() -> None:
    points = [
        point(1, 0.0, k=2, spec_ms=1.0),
        point(1, 0.0, k=4, spec_ms=1.0),
        point(1, 1.0, k=2, spec_ms=None),
        point(1, 1.0, k=4, spec_ms=0.1),
    ]
    schedule = propose_schedule(points)
    assert schedule is not None
    assert schedule.num_speculative_tokens_per_batch_size == [(1, 1, 2)]
    assert propose_schedule([point(1, 0.0, base_ms=None)]) is None


def calibration_document() -> dict[str, object]:
    points = [point(1, 0.0, spec_ms=1.5), point(8, None, spec_ms=2.4)]
    built = build_calibration("m", points, tpot_source="server", assumed_cost_ratio=0.1)
    return dict(json.loads(built.model_dump_json()))


def test_the_file_round_trips_and_keys_concurrency_as_text() -> None:
    document = calibration_document()
    assert document["kind"] == "specdec-exporter calibration"
    assert document["break_even_acceptance_rate"] == {"1": 0.125, "8": pytest.approx(0.35)}
    parsed = Calibration.model_validate(document)
    assert parsed.break_even_acceptance_rate[8] == pytest.approx(0.35)
    assert parsed.points[1].temperature is None
    assert (
        parsed.model_dump()
        == Calibration.model_validate_json(parsed.model_dump_json()).model_dump()
    )


@pytest.mark.parametrize(
    "change",
    [
        {"draft_cost_ratio": None},
        {"kind": "something else"},
        {"draft_cost_ratio": float("inf")},
        {"models": {"m": {"draft_cost_ratio": 0.2, "break_even_acceptance_rate": -1}}},
    ],
)
def test_a_bad_file_is_rejected(change: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Calibration.model_validate({**calibration_document(), **change})


def test_cost_ratio_per_model_else_top_level() -> None:
    entry = {"draft_cost_ratio": 1.2, "break_even_acceptance_rate": 1.2}
    both = Calibration.model_validate(
        {
            "model_name": "a",
            "draft_cost_ratio": 0.3,
            "models": {"a": entry, "b": {**entry, "draft_cost_ratio": 0.5}},
        }
    )
    assert both.cost_ratio_for("a") == 1.2
    assert both.cost_ratio_for("b") == 0.5
    assert both.cost_ratio_for("other") == 0.3
    assert both.cost_ratio_for() == 0.3  # two entries and no model name: the top-level figure
    single = Calibration.model_validate(
        {"model_name": "a", "draft_cost_ratio": 0.3, "models": {"a": entry}}
    )
    assert single.cost_ratio_for() == 1.2
    negative = Calibration.model_validate({"model_name": "a", "draft_cost_ratio": -0.05})
    assert negative.cost_ratio_for("a") == 0.0


def test_requests_running_sums_engines_per_model() -> None:
    text = (V033 / "nospec.t1.prom").read_text()
    assert requests_running(text) == {"meta-llama/Llama-3.1-8B-Instruct": 18.0}
    two_engines = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        'vllm_num_requests_running{engine="0",model_name="n"} 1.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 9.0\n'
    )
    assert requests_running(two_engines) == {"m": 7.0, "n": 1.0}
    assert requests_running("vllm:other 1\n") == {}

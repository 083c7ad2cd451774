"""Report entries over windows of the real capture equal the ground truth's interval sums."""

from __future__ import annotations

import json

import pytest

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import parse
from specdec_exporter.core.report import ALL_ENGINES, build_report, overall_verdict, rows_to_show
from specdec_exporter.core.timeline import Timeline
from specdec_exporter.core.verdict import DEFAULT_CRITERIA, Criteria
from variants import MODEL, V033, capture, with_engines

TRUTH = {
    s["tag"]: s["per_engine"]["0"]["interval"]
    for s in json.loads((V033 / "spec_ngram_k4.ground-truth.json").read_text())["snapshots"]
}


def window_report(
    tags: list[str],
    engines: int = 1,
    cost: float = 0.1,  # type: ignore[type-arg]
    criteria: Criteria = DEFAULT_CRITERIA,
) -> list:
    timeline: Timeline[tuple[str, str]] = Timeline(3600)
    snapshot = None
    for index, tag in enumerate(tags):
        snapshot = parse(with_engines(capture(tag), engines) if engines > 1 else capture(tag))
        timeline.observe(5.0 * index, snapshot.counters)
    assert snapshot is not None
    return build_report(snapshot, timeline.window(), DraftCost(cost, "flag"), criteria)


def interval_sum(tags: list[str]) -> Totals:
    total = Totals()
    for tag in tags:
        truth = TRUTH[tag]
        total = total + Totals(
            truth["num_drafts"],
            truth["num_draft_tokens"],
            truth["num_accepted_tokens"],
            tuple(truth["num_accepted_tokens_per_pos"]),
            truth["num_generation_tokens"],
        )
    return total


def test_high_acceptance_window_equals_ground_truth() -> None:
    entries = window_report(["t1", "t2", "t3"])
    truth = interval_sum(["t2", "t3"])
    engine, aggregate = entries
    assert (engine.engine, aggregate.engine) == ("0", ALL_ENGINES)
    assert aggregate.acceptance_rate == truth.accepted_tokens / truth.draft_tokens
    assert aggregate.mean_acceptance_length == 1 + truth.accepted_tokens / truth.drafts
    assert aggregate.per_position_acceptance_rate == [
        accepted / truth.drafts for accepted in truth.accepted_per_position
    ]
    assert aggregate.draft_share == truth.accepted_tokens / truth.generation_tokens
    assert (aggregate.drafts, aggregate.draft_tokens, aggregate.accepted_tokens) == (
        truth.drafts,
        truth.draft_tokens,
        truth.accepted_tokens,
    )
    assert aggregate.drafts_per_second == truth.drafts / 10.0
    assert aggregate.verdict == "healthy"


def test_single_interval_matches_vllm_ground_truth_figures() -> None:
    for previous, tag in [("t0", "t1"), ("t3", "t4"), ("t5", "t6")]:
        aggregate = window_report([previous, tag])[-1]
        truth = TRUTH[tag]
        # The ground truth file rounds its figures to 6 decimals; its counts are exact.
        assert aggregate.acceptance_rate == truth["num_accepted_tokens"] / truth["num_draft_tokens"]
        assert round(aggregate.acceptance_rate, 6) == truth["acceptance_rate"]
        assert round(aggregate.mean_acceptance_length, 6) == truth["mean_acceptance_length"]
        assert [round(r, 6) for r in aggregate.per_position_acceptance_rate] == truth[
            "per_position_acceptance_rate"
        ]


def test_low_acceptance_window_is_below_threshold_while_the_model_says_it_pays() -> None:
    # t4..t6: 18207 accepted of 52988 draft tokens in 13247 drafts of 4 (a = 0.344, L = 2.374);
    # with c = 0.1, 2.374 / 1.4 = 1.696: below t, but no net loss.
    aggregate = window_report(["t3", "t4", "t5", "t6"])[-1]
    assert aggregate.acceptance_rate == 18207 / 52988
    assert aggregate.estimated_speedup == (1 + 18207 / 13247) / 1.4
    assert aggregate.break_even_acceptance_rate == pytest.approx(0.1)
    assert (aggregate.threshold, aggregate.draft_cost_ratio) == (0.5, 0.1)
    assert aggregate.draft_cost_ratio_source == "flag"
    assert aggregate.verdict == "below threshold"


def test_the_same_window_with_a_heavy_drafter_says_disable() -> None:
    # c = 0.35: 2.374 / (1 + 4 * 0.35) = 0.989 < 1, a net loss; break-even 0.35 > a = 0.344.
    aggregate = window_report(["t3", "t4", "t5", "t6"], cost=0.35)[-1]
    assert aggregate.estimated_speedup == pytest.approx(0.98934, abs=1e-5)
    assert aggregate.break_even_acceptance_rate == pytest.approx(0.35)
    assert aggregate.verdict == "disable"


def test_a_configured_threshold_moves_the_verdict() -> None:
    aggregate = window_report(
        ["t3", "t4", "t5", "t6"], criteria=Criteria(threshold=0.3, healthy_above=0.4)
    )[-1]
    assert aggregate.verdict == "borderline"
    assert aggregate.threshold == 0.3


def test_idle_window_is_not_drafting() -> None:
    aggregate = window_report(["t7", "t8"])[-1]
    assert aggregate.acceptance_rate is None and aggregate.verdict == "not drafting"
    assert aggregate.estimated_speedup is None


def test_engines_are_summed_before_dividing() -> None:
    entries = window_report(["t1", "t2"], engines=3)
    assert [e.engine for e in entries] == ["0", "1", "2", ALL_ENGINES]
    truth = interval_sum(["t2"])
    aggregate = entries[-1]
    assert aggregate.drafts == 6 * truth.drafts  # engines 1..3 carry 1x, 2x, 3x engine 0
    assert aggregate.acceptance_rate == (6 * truth.accepted_tokens) / (6 * truth.draft_tokens)


def test_modelled_speedup_uses_mean_acceptance_length() -> None:
    aggregate = window_report(["t1", "t2"], cost=0.25)[-1]
    assert aggregate.mean_acceptance_length is not None
    assert aggregate.estimated_speedup == aggregate.mean_acceptance_length / 2.0


def test_spec_off_is_not_enabled() -> None:
    snapshot = parse((V033 / "nospec.t1.prom").read_text())
    timeline: Timeline[tuple[str, str]] = Timeline(60)
    timeline.observe(0, snapshot.counters)
    timeline.observe(5, snapshot.counters)
    entries = build_report(snapshot, timeline.window(), DraftCost(0.1, "default"))
    assert [(e.model_name, e.engine, e.verdict) for e in entries] == [
        (MODEL, "0", "not enabled"),
        (MODEL, ALL_ENGINES, "not enabled"),
    ]
    assert overall_verdict(entries).exit_code == 2


def test_the_all_row_is_shown_only_for_a_model_with_several_engines() -> None:
    rows = [
        ("one", "0"),
        ("one", "all"),
        ("two", "0"),
        ("two", "1"),
        ("two", "all"),
        ("idle", "all"),
    ]
    assert rows_to_show(rows, lambda row: row) == [
        ("one", "0"),
        ("two", "0"),
        ("two", "1"),
        ("two", "all"),
        ("idle", "all"),
    ]

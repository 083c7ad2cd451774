"""Pure maths with literal numbers."""

from __future__ import annotations

import math

import pytest

from specdec_exporter.core.acceptance import (
    Totals,
    Verdict,
    break_even_acceptance_rate,
    counter_delta,
    draft_cost_ratio_for,
    estimated_speedup,
    figures,
    iid_mean_acceptance_length,
    totals_delta,
    verdict,
)


def test_counter_delta_treats_a_lower_value_as_a_reset() -> None:
    assert counter_delta(100.0, 130.0) == 30.0
    assert counter_delta(100.0, 100.0) == 0.0
    assert counter_delta(100.0, 7.0) == 7.0


def test_totals_delta_per_counter_and_positions() -> None:
    before = Totals(10, 40, 30, (9, 8, 7, 6), 50)
    after = Totals(15, 60, 41, (13, 11, 9, 8), 70)
    assert totals_delta(before, after) == Totals(5, 20, 11, (4, 3, 2, 2), 20)


def test_totals_delta_after_a_restart_counts_from_zero() -> None:
    before = Totals(1000, 4000, 3000, (900, 800, 700, 600), 5000)
    after = Totals(3, 12, 5, (2, 2, 1, 0), 9)
    assert totals_delta(before, after) == after


def test_totals_delta_when_k_changes_takes_the_new_positions() -> None:
    delta = totals_delta(Totals(1, 4, 2, (1, 1, 0, 0)), Totals(3, 8, 4, (2, 1)))
    assert delta.accepted_per_position == (2, 1)


def test_figures_follow_vllm_definitions() -> None:
    result = figures(Totals(drafts=8, draft_tokens=32, accepted_tokens=12,
                            accepted_per_position=(6, 3, 2, 1), generation_tokens=20))
    assert result.acceptance_rate == 0.375
    assert result.mean_acceptance_length == 2.5
    assert result.per_position_acceptance_rate == (0.75, 0.375, 0.25, 0.125)
    assert result.draft_share == 0.6


def test_figures_without_drafts_are_undefined_not_zero() -> None:
    result = figures(Totals(accepted_per_position=(0, 0)))
    assert result.acceptance_rate is None
    assert result.mean_acceptance_length is None
    assert result.per_position_acceptance_rate == (None, None)
    assert result.draft_share is None


def test_estimated_speedup() -> None:
    assert estimated_speedup(3.0, 4, 0.25) == 1.5
    assert estimated_speedup(2.0, 4, 0.0) == 2.0


def test_iid_mean_acceptance_length() -> None:
    assert iid_mean_acceptance_length(0.5, 2) == 1.75
    assert iid_mean_acceptance_length(0.0, 4) == 1.0
    assert iid_mean_acceptance_length(1.0, 4) == 5.0


def test_break_even_acceptance_rate() -> None:
    assert break_even_acceptance_rate(1, 0.5) == pytest.approx(0.5, abs=1e-12)
    assert break_even_acceptance_rate(2, 0.5) == pytest.approx((math.sqrt(5) - 1) / 2, abs=1e-12)
    assert break_even_acceptance_rate(4, 0.0) == 0.0
    assert break_even_acceptance_rate(4, 1.0) is None  # L can never reach 1 + k*c = k + 1
    assert break_even_acceptance_rate(0, 0.1) is None


def test_break_even_gives_speedup_one() -> None:
    alpha = break_even_acceptance_rate(4, 0.1)
    assert alpha is not None
    length = iid_mean_acceptance_length(alpha, 4)
    assert estimated_speedup(length, 4, 0.1) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    ("enabled", "drafts", "rate", "expected"),
    [
        (False, 10, 0.9, Verdict.NOT_ENABLED),
        (True, 0, None, Verdict.NOT_DRAFTING),
        (True, 10, 0.49, Verdict.DISABLE),
        (True, 10, 0.5, Verdict.BORDERLINE),
        (True, 10, 0.65, Verdict.BORDERLINE),
        (True, 10, 0.66, Verdict.HEALTHY),
    ],
)
def test_verdict_rule_of_thumb(enabled: bool, drafts: float, rate: float | None,
                               expected: Verdict) -> None:
    assert verdict(enabled, drafts, rate) is expected


def test_exit_codes() -> None:
    assert [v.exit_code for v in Verdict] == [0, 1, 2, 1, 2]


def test_draft_cost_ratio_defaults() -> None:
    assert draft_cost_ratio_for(None, None) == 0.1
    assert draft_cost_ratio_for("ngram", None) == 0.01
    assert draft_cost_ratio_for("eagle3", None) == 0.05
    assert draft_cost_ratio_for("deepseek_mtp", None) == 0.05
    assert draft_cost_ratio_for("draft_model", 0.3) == 0.3
    assert draft_cost_ratio_for("unknown", None) == 0.1

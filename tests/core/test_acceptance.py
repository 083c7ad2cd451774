"""Pure maths with literal numbers."""

from __future__ import annotations

from specdec_exporter.core.acceptance import (
    Totals,
    acceptance_rate,
    counter_delta,
    figures,
    mean_acceptance_length,
    totals_delta,
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
    result = figures(
        Totals(
            drafts=8,
            draft_tokens=32,
            accepted_tokens=12,
            accepted_per_position=(6, 3, 2, 1),
            generation_tokens=20,
        )
    )
    assert result.acceptance_rate == 0.375
    assert result.mean_acceptance_length == 2.5
    assert result.per_position_acceptance_rate == (0.75, 0.375, 0.25, 0.125)
    assert result.draft_share == 0.6
    assert result.mean_draft_length == 4.0


def test_figures_without_drafts_are_undefined_not_zero() -> None:
    result = figures(Totals(accepted_per_position=(0, 0)))
    assert result.acceptance_rate is None
    assert result.mean_acceptance_length is None
    assert result.per_position_acceptance_rate == (None, None)
    assert result.draft_share is None
    assert result.mean_draft_length is None


def test_the_two_ratios_of_one_set_of_counts() -> None:
    assert acceptance_rate(12, 32) == 0.375
    assert mean_acceptance_length(12, 8) == 2.5
    assert mean_acceptance_length(0, 8) == 1.0  # drafted, nothing accepted: the bonus token only
    assert acceptance_rate(0, 0) is None and mean_acceptance_length(0, 0) is None

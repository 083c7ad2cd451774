"""The speedup model with literal numbers: c and its source, modelled speedup, break-even."""

from __future__ import annotations

import pytest

from specdec_exporter.core.acceptance import Totals, figures
from specdec_exporter.core.model import (
    DraftCost,
    break_even_acceptance_rate,
    modelled_speedup,
    resolve_draft_cost,
)


def test_modelled_speedup_is_l_over_one_plus_k_c() -> None:
    assert modelled_speedup(3.0, 4, 0.25) == 1.5
    assert modelled_speedup(2.0, 4, 0.0) == 2.0


def test_eagle3_at_a_quarter_acceptance_still_pays_by_the_model() -> None:
    # k = 4, every draft 4 long, a = 0.25: L = 1 + 0.25 * 4 = 2; 2 / (1 + 4 * 0.05) = 1.667.
    derived = figures(Totals(drafts=100, draft_tokens=400, accepted_tokens=100))
    assert derived.mean_acceptance_length == 2.0
    assert modelled_speedup(2.0, 4, 0.05) == pytest.approx(1.6667, abs=1e-4)


def test_break_even_is_c_when_every_draft_is_k_long() -> None:
    assert break_even_acceptance_rate(4, 0.1) == pytest.approx(0.1, abs=1e-15)
    assert break_even_acceptance_rate(4, 0.1, mean_draft_length=4.0) == pytest.approx(0.1)
    assert break_even_acceptance_rate(2, 0.7) == pytest.approx(0.7)
    assert break_even_acceptance_rate(4, 0.0) == 0.0


def test_break_even_with_shorter_drafts_is_k_c_over_m() -> None:
    # ngram proposing 2.5 tokens per draft on average with k = 4: a = 4 * 0.1 / 2.5 = 0.16.
    assert break_even_acceptance_rate(4, 0.1, mean_draft_length=2.5) == pytest.approx(0.16)
    assert break_even_acceptance_rate(4, 1.5) == pytest.approx(1.5)  # above 1: never pays


@pytest.mark.parametrize(
    ("k", "c", "drafts", "draft_tokens"),
    [(4, 0.1, 100, 400), (4, 0.05, 100, 400), (2, 0.3, 50, 100), (4, 0.1, 100, 250)],
)
def test_at_the_break_even_acceptance_the_modelled_speedup_is_one(
    k: int, c: float, drafts: float, draft_tokens: float
) -> None:
    derived = figures(Totals(drafts=drafts, draft_tokens=draft_tokens))
    rate = break_even_acceptance_rate(k, c, derived.mean_draft_length)
    at_break_even = figures(
        Totals(drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=rate * draft_tokens)
    )
    assert at_break_even.acceptance_rate == pytest.approx(rate)
    assert at_break_even.mean_acceptance_length is not None
    speedup = modelled_speedup(at_break_even.mean_acceptance_length, k, c)
    assert round(speedup, 3) == 1.000
    assert speedup == pytest.approx(1.0, abs=1e-12)


def test_draft_cost_comes_from_flag_then_calibration_then_method_then_default() -> None:
    assert resolve_draft_cost(0.3, "draft_model", None) == DraftCost(0.3, "flag", "draft_model")
    assert resolve_draft_cost(None, "draft_model", 0.7) == DraftCost(
        0.7, "calibration", "draft_model"
    )
    assert resolve_draft_cost(None, "ngram", None) == DraftCost(0.01, "method", "ngram")
    assert resolve_draft_cost(None, "eagle3", None) == DraftCost(0.05, "method", "eagle3")
    assert resolve_draft_cost(None, "deepseek_mtp", None) == DraftCost(
        0.05, "method", "deepseek_mtp"
    )
    assert resolve_draft_cost(None, "medusa", None) == DraftCost(0.1, "default", "medusa")
    assert resolve_draft_cost(None, None, None) == DraftCost(0.1, "default", None)


def test_an_unknown_method_is_refused_unless_c_is_given() -> None:
    """A typo must not silently give the default c; with c given, the method only labels."""
    with pytest.raises(ValueError) as refused:
        resolve_draft_cost(None, "eagel3", None)
    assert str(refused.value) == (
        "unknown --speculative-method 'eagel3'; known: dflash, draft_model, dspark, eagle, "
        "eagle3, mtp, ngram, ngram_gpu, suffix, *_mtp, custom_class, extract_hidden_states, "
        "medusa, mlp_speculator (for a method this version does not know, give c with "
        "--draft-cost-ratio)"
    )
    assert resolve_draft_cost(0.2, "eagel3", None) == DraftCost(0.2, "flag", "eagel3")
    assert resolve_draft_cost(None, "eagel3", 0.3) == DraftCost(0.3, "calibration", "eagel3")


def test_a_flag_and_a_calibration_together_are_refused() -> None:
    with pytest.raises(ValueError, match="both set c"):
        resolve_draft_cost(0.2, None, 0.7)


def test_describe_names_where_c_came_from() -> None:
    assert DraftCost(0.01, "method", "ngram").describe() == "c = 0.01 (default of method ngram)"
    assert DraftCost(0.7, "calibration").describe() == "c = 0.7 (calibration)"
    assert DraftCost(0.3, "flag").describe() == "c = 0.3 (--draft-cost-ratio)"
    assert DraftCost(0.1, "default").describe() == "c = 0.1 (default, no --speculative-method)"
    assert DraftCost(0.1, "default", "medusa").describe() == (
        "c = 0.1 (default, no c assumed for method medusa)"
    )

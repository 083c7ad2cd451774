"""The decision table with literal numbers: every row, its edges, exit codes and explanations."""

from __future__ import annotations

import pytest

from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.verdict import (
    ACCEPTANCE_THRESHOLD,
    HEALTHY_ABOVE,
    Criteria,
    Verdict,
    explain,
    verdict,
    worst,
)

T_04 = Criteria(threshold=0.4, healthy_above=0.6)


@pytest.mark.parametrize(
    ("enabled", "drafts", "rate", "speedup", "break_even", "criteria", "expected"),
    [
        (False, 10, 0.9, 2.0, 0.1, Criteria(), Verdict.NOT_ENABLED),
        (True, 0, None, None, 0.1, Criteria(), Verdict.NOT_DRAFTING),
        # s < 1 or break-even > 1: a net loss, whatever the acceptance.
        (True, 10, 0.9, 0.99, 0.1, Criteria(), Verdict.DISABLE),
        (True, 10, 0.2, 0.8, 0.1, Criteria(), Verdict.DISABLE),
        (True, 10, 0.9, None, 1.2, Criteria(), Verdict.DISABLE),
        # a < t and s >= 1: below threshold, not disable (eagle3, k=4, c=0.05, a=0.25: 1.67).
        (True, 10, 0.25, 1.6667, 0.05, Criteria(), Verdict.BELOW_THRESHOLD),
        (True, 10, 0.49, 1.0, 0.1, Criteria(), Verdict.BELOW_THRESHOLD),
        (True, 10, 0.49, None, None, Criteria(), Verdict.BELOW_THRESHOLD),
        # t <= a <= 0.65: borderline; above: healthy.
        (True, 10, 0.5, 2.0, 0.1, Criteria(), Verdict.BORDERLINE),
        (True, 10, 0.65, 2.0, 0.1, Criteria(), Verdict.BORDERLINE),
        (True, 10, 0.66, 2.0, 0.1, Criteria(), Verdict.HEALTHY),
        (True, 10, 0.66, None, None, Criteria(), Verdict.HEALTHY),
        # A configured t and band move the rows.
        (True, 10, 0.45, 1.5, 0.1, T_04, Verdict.BORDERLINE),
        (True, 10, 0.39, 1.5, 0.1, T_04, Verdict.BELOW_THRESHOLD),
        (True, 10, 0.61, 1.5, 0.1, T_04, Verdict.HEALTHY),
    ],
)
def test_decision_table(
    *,
    enabled: bool,
    drafts: float,
    rate: float | None,
    speedup: float | None,
    break_even: float | None,
    criteria: Criteria,
    expected: Verdict,
) -> None:
    assert (
        verdict(enabled, drafts, rate, speedup=speedup, break_even=break_even, criteria=criteria)
        is expected
    )


def test_defaults() -> None:
    assert (ACCEPTANCE_THRESHOLD, HEALTHY_ABOVE) == (0.5, 0.65)
    assert Criteria() == Criteria(0.5, 0.65)


@pytest.mark.parametrize(("threshold", "healthy_above"), [(0.7, 0.65), (0.0, 0.5), (0.5, 1.1)])
def test_criteria_out_of_order_are_refused(threshold: float, healthy_above: float) -> None:
    with pytest.raises(ValueError, match="threshold <= healthy_above"):
        Criteria(threshold, healthy_above)


def test_exit_codes() -> None:
    assert {v.value: v.exit_code for v in Verdict} == {
        "healthy": 0,
        "borderline": 1,
        "below threshold": 1,
        "disable": 2,
        "not drafting": 1,
        "not enabled": 2,
    }


def test_worst_of_several_models() -> None:
    assert worst([Verdict.HEALTHY, Verdict.BELOW_THRESHOLD, Verdict.BORDERLINE]) is (
        Verdict.BELOW_THRESHOLD
    )
    assert worst([Verdict.NOT_DRAFTING, Verdict.BORDERLINE]) is Verdict.BORDERLINE
    assert worst([Verdict.HEALTHY, Verdict.NOT_DRAFTING]) is Verdict.NOT_DRAFTING
    assert worst([Verdict.NOT_ENABLED, Verdict.DISABLE]) is Verdict.DISABLE
    assert worst([]) is None


def test_below_threshold_names_a_t_s_and_c_and_claims_no_loss() -> None:
    text = explain(
        Verdict.BELOW_THRESHOLD,
        acceptance_rate=0.25,
        speedup=1.6667,
        break_even=0.05,
        cost=DraftCost(0.05, "method", "eagle3"),
        criteria=Criteria(),
    )
    assert text == (
        "acceptance below t, but the model says speculation still pays (acceptance "
        "0.250, t = 0.5, modelled speedup 1.67, c = 0.05 (default of method eagle3)); "
        "calibrate, or lower t for this method"
    )
    assert "loss" not in text


def test_disable_claims_a_net_loss_with_its_figures() -> None:
    text = explain(
        Verdict.DISABLE,
        acceptance_rate=0.6,
        speedup=0.93,
        break_even=0.7,
        cost=DraftCost(0.7, "calibration"),
        criteria=Criteria(),
    )
    assert text.startswith(
        "modelled speedup below 1: speculation is a net loss (acceptance "
        "0.600, t = 0.5, modelled speedup 0.93, c = 0.7 (calibration))"
    )
    above_one = explain(
        Verdict.DISABLE,
        acceptance_rate=0.9,
        speedup=None,
        break_even=1.5,
        cost=DraftCost(1.5, "flag"),
        criteria=Criteria(),
    )
    assert above_one.startswith("break-even acceptance 1.5 > 1: at this c no acceptance pays")


def test_healthy_and_borderline_name_the_band() -> None:
    cost = DraftCost(0.1, "default")
    assert explain(
        Verdict.BORDERLINE,
        acceptance_rate=0.55,
        speedup=2.0,
        break_even=0.1,
        cost=cost,
        criteria=Criteria(),
    ).startswith("acceptance 0.5-0.65: borderline")
    assert explain(
        Verdict.HEALTHY,
        acceptance_rate=0.8,
        speedup=3.0,
        break_even=0.1,
        cost=cost,
        criteria=Criteria(),
    ).startswith("acceptance above 0.65")

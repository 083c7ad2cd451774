"""The core is total (issue 26): over any snapshot a poll can carry and any label text, the report,
bucket and batch-bucket entries, the verdict and the calibration maths raise nothing and give only
finite figures (None where a figure has no meaning); through the poller, nothing on /metrics or in
/api/report is NaN or ±Inf and no poll is an internal error.

Counts range over zero, ~1.8e308, tiny, negative, NaN and ±Inf, drafts without draft tokens and
draft tokens without drafts, and counter resets (a sequence of snapshots going up and down);
labels over non-ASCII digits ("²", "٣"), "", "0+", 10 KB and arbitrary text.

Checked that they can fail (issue 26's "a planted division by zero must make them fail"): on a
copy of this branch's src/ with ``core.model.break_even_acceptance_rate`` planted back as
``k * c / drafted``, 6 of these tests fail in 5 s (report over polls and over a window, bucket and
batch entries, the model maths, and the poller property, which sees an internal-error poll); run
against main before the fix (416c38f), 16 fail (ZeroDivisionError, ValueError from ``int("²")``
and from 10,000 digits, NaN figures, a NaN acceptance rate judged "healthy", batch ranges for
"0+", "4-2", "²"). Explicit examples hold the drafts-without-draft-tokens window, so the plant is
caught on every run, not by chance.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from probe_text import probe_text
from specdec_exporter.core.acceptance import Totals, figures
from specdec_exporter.core.batch_report import batch_entries, batch_range
from specdec_exporter.core.calibration import (
    Calibration,
    CalibrationPoint,
    ConcurrencyFit,
    fit_per_concurrency,
    fitted_draft_cost_ratio,
    measured_speedup,
    propose_schedule,
)
from specdec_exporter.core.histogram import figures as histogram_figures
from specdec_exporter.core.histogram import quantile
from specdec_exporter.core.model import DraftCost, break_even_acceptance_rate, modelled_speedup
from specdec_exporter.core.parse import ExpositionError, Snapshot, parse
from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.core.report import bucket_entries, build_report
from specdec_exporter.core.timeline import Timeline, Window
from specdec_exporter.core.verdict import DEFAULT_CRITERIA, explain, verdict
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.scraper import Scrape
from specdec_exporter.sidecar.split_collector import SplitCollector
from variants import MODEL

BOUNDED = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

POLLER_BOUNDED = settings(BOUNDED, max_examples=20)
"""Each example polls 2-4 times through the real poller and collectors: fewer, for a fast suite."""

ODD_COUNTS = [0.0, 5e-324, 1e-300, 1.0, 4.0, 1.7976931348623157e308, 1e308, -1.0, -1e308]
NON_FINITE = [math.nan, math.inf, -math.inf]
ODD_LABELS = ["²", "٣", "", "0", "0+", "1", "2-4", "65+", "4-2", "0-0", "+1", " 1", "1e309", "x"]
LONG_LABELS = ["9" * 10_240, "x" * 10_240, "1-" + "9" * 10_000]

counts = st.one_of(
    st.sampled_from(ODD_COUNTS + NON_FINITE), st.floats(allow_nan=True, allow_infinity=True)
)
labels = st.one_of(st.sampled_from(ODD_LABELS + LONG_LABELS), st.text(max_size=12))
totals = st.builds(
    Totals,
    drafts=counts,
    draft_tokens=counts,
    accepted_tokens=counts,
    accepted_per_position=st.lists(counts, max_size=5).map(tuple),
    generation_tokens=counts,
    steps=counts,
)
costs = st.builds(
    DraftCost,
    ratio=st.one_of(st.sampled_from([0.0, 0.1, 1e-300, 1e300]), st.floats(0, 10)),
    source=st.sampled_from(["flag", "calibration", "method", "default"]),
)
seconds = st.one_of(st.sampled_from([0.0, 5e-324, 30.0, 1e308]), counts)
K_FOUR = Totals(accepted_per_position=(0.0,) * 4)
"""A model's cumulative counts that only say k = 4 (so break-even and speedup are modelled)."""
DRAFTS_WITHOUT_DRAFT_TOKENS = Totals(5.0, 0.0, 0.0, (0.0,) * 4)
"""Structured output: every draft token of the window invalidated by the grammar."""


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    keys = draw(st.lists(st.tuples(labels, labels), max_size=3, unique=True))
    counters = {key: draw(totals) for key in keys}
    return Snapshot(
        spec_decode_enabled=draw(st.booleans()),
        counters=counters,
        spec_series=frozenset(counters),
        generation_series=frozenset(counters),
    )


def figures_of(value: Any) -> Iterator[tuple[str, float]]:
    """Every float a result carries, with where it sits."""
    if isinstance(value, float):
        yield "", value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from ((f"{key}.{where}", found) for where, found in figures_of(item))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from figures_of(item)
    elif is_dataclass(value) and not isinstance(value, type):
        for field in fields(value):
            found = figures_of(getattr(value, field.name))
            yield from ((f"{field.name}.{where}", number) for where, number in found)


def assert_finite(value: Any) -> None:
    bad = [(where, number) for where, number in figures_of(value) if not math.isfinite(number)]
    assert not bad, bad


@BOUNDED
@given(st.lists(snapshots(), min_size=1, max_size=4), st.lists(seconds, min_size=4), costs)
def test_build_report_over_any_polls_gives_finite_figures_or_none(
    polls: list[Snapshot], times: list[float], cost: DraftCost
) -> None:
    timeline: Timeline[tuple[str, str]] = Timeline(60)
    for at, snapshot in enumerate(polls):
        timeline.observe(float(at), snapshot.counters)
        report = build_report(snapshot, timeline.window(), cost)
        assert_finite([entry.as_json() for entry in report])


@BOUNDED
@given(snapshots(), st.dictionaries(st.tuples(labels, labels), totals, max_size=4), seconds, costs)
@example(
    Snapshot(True), {(MODEL, "0"): DRAFTS_WITHOUT_DRAFT_TOKENS}, 30.0, DraftCost(0.1, "default")
)
def test_build_report_over_any_window_gives_finite_figures_or_none(
    snapshot: Snapshot, deltas: dict[tuple[str, str], Totals], span: float, cost: DraftCost
) -> None:
    models = {model for model, _ in deltas}
    snapshot = Snapshot(
        snapshot.spec_decode_enabled,
        {**snapshot.counters, **{(model, "0"): K_FOUR for model in models}},
    )
    report = build_report(snapshot, Window(span, deltas), cost)
    assert_finite([entry.as_json() for entry in report])


@BOUNDED
@given(snapshots(), st.dictionaries(st.tuples(labels, labels), totals, max_size=4), seconds, costs)
@example(
    Snapshot(True), {(MODEL, "0.5-0.7"): DRAFTS_WITHOUT_DRAFT_TOKENS}, 30.0, DraftCost(0.1, "flag")
)
def test_bucket_entries_give_finite_figures_or_none(
    snapshot: Snapshot, deltas: dict[tuple[str, str], Totals], span: float, cost: DraftCost
) -> None:
    models = {model for model, _ in deltas}
    snapshot = Snapshot(
        snapshot.spec_decode_enabled,
        {**snapshot.counters, **{(model, "0"): K_FOUR for model in models}},
    )
    buckets = bucket_entries(snapshot, deltas, seconds=span, cost=cost, criteria=DEFAULT_CRITERIA)
    assert_finite([entry.as_json() for entry in buckets.values()])


calibration_fits = st.lists(
    st.builds(
        ConcurrencyFit,
        concurrency=st.integers(1, 10**9),
        draft_cost_ratio=st.one_of(st.none(), counts),
        break_even_acceptance_rate=st.none(),
    ),
    max_size=3,
)
calibration_points = st.lists(
    st.builds(
        CalibrationPoint,
        concurrency=st.integers(1, 10**9),
        temperature=st.one_of(st.none(), st.floats(0, 2)),
        num_speculative_tokens=st.integers(1, 8),
        drafts=st.sampled_from([0.0, 1.0, 1e308, math.inf]),
        draft_tokens=st.sampled_from([0.0, 4.0, 1e308, math.inf]),
        accepted_tokens=st.sampled_from([0.0, 2.0, 1e308, math.inf]),
        acceptance_rate=st.none(),
        mean_acceptance_length=st.none(),
        tpot_spec_ms=st.one_of(st.none(), counts),
        tpot_base_ms=st.one_of(st.none(), counts),
        measured_speedup=st.none(),
        modelled_speedup=st.none(),
        draft_cost_ratio=st.one_of(st.none(), counts),
        requests_spec=st.just(1),
        requests_base=st.just(1),
    ),
    max_size=4,
)


@BOUNDED
@given(
    snapshots(),
    st.dictionaries(st.tuples(labels, labels, labels), totals, max_size=4),
    seconds,
    costs,
    st.one_of(
        st.none(),
        st.builds(
            Calibration,
            model_name=st.just(MODEL),
            draft_cost_ratio=st.floats(-1, 1),
            concurrency_fits=calibration_fits,
            points=calibration_points,
        ),
    ),
)
def test_batch_entries_give_finite_figures_or_none(
    snapshot: Snapshot,
    deltas: dict[tuple[str, str, str], Totals],
    span: float,
    cost: DraftCost,
    calibration: Calibration | None,
) -> None:
    models = {model for model, _, _ in deltas}
    snapshot = Snapshot(
        snapshot.spec_decode_enabled,
        {**snapshot.counters, **{(model, "0"): K_FOUR for model in models}},
    )
    rows = batch_entries(
        snapshot,
        deltas,
        seconds=span,
        cost=cost,
        criteria=DEFAULT_CRITERIA,
        calibration=calibration,
    )
    assert_finite([row.as_json() for row in rows])


@pytest.mark.parametrize("label", ["²", "٣", "", "0", "0+", "0-4", "4-2", "+1", " 1", *LONG_LABELS])
def test_a_batch_bucket_label_names_sizes_only_by_ascii_rules(label: str) -> None:
    assert batch_range(label) is None


def test_batch_bucket_labels_of_the_probe_name_their_sizes() -> None:
    assert [batch_range(label) for label in ("1", "2-4", "65+")] == [
        batch_range("1-1"),
        batch_range("2-4"),
        batch_range("65+"),
    ]
    sizes = batch_range("65+")
    assert sizes is not None and (sizes.low, sizes.high) == (65, None)


maybe = st.one_of(st.none(), counts)


@BOUNDED
@given(st.booleans(), counts, st.tuples(maybe, maybe, maybe), costs)
def test_the_verdict_and_its_explanation_take_any_figures(
    enabled: bool,
    drafts: float,
    figures_given: tuple[float | None, float | None, float | None],
    cost: DraftCost,
) -> None:
    rate, speedup, break_even = figures_given
    result = verdict(enabled, drafts, rate, speedup=speedup, break_even=break_even)
    if rate is not None and not math.isfinite(rate) and enabled:
        assert result.value == "not drafting"
    assert explain(
        result,
        acceptance_rate=rate,
        speedup=speedup,
        break_even=break_even,
        cost=cost,
        criteria=DEFAULT_CRITERIA,
    )


@BOUNDED
@given(totals, st.integers(0, 64), costs, counts, counts)
def test_the_model_and_calibration_maths_give_finite_figures_or_none(
    counted: Totals, k: int, cost: DraftCost, tpot_base: float, tpot_spec: float
) -> None:
    derived = figures(counted)
    assert_finite(derived)
    length = derived.mean_acceptance_length
    found: list[float | None] = [
        break_even_acceptance_rate(k, cost.ratio, derived.mean_draft_length),
        None if length is None else modelled_speedup(length, k, cost.ratio),
        measured_speedup(tpot_base, tpot_spec),
    ]
    speedup = found[-1]
    if length is not None and speedup is not None:
        found.append(fitted_draft_cost_ratio(length, k, speedup))
    assert_finite(found)


@BOUNDED
@given(calibration_points)
def test_calibration_fits_and_schedule_take_any_points(points: list[CalibrationPoint]) -> None:
    assert_finite(fit_per_concurrency(points))
    propose_schedule(points)


# Through the poller: what reaches /metrics and /api/report

text_labels = st.one_of(
    st.sampled_from(ODD_LABELS + LONG_LABELS[:1]),
    st.text(st.characters(exclude_characters='"\\\n', exclude_categories=["Cs"]), max_size=8),
)
written_counts = st.one_of(
    st.sampled_from(["0", "5e-324", "1.7976931348623157e308", "1e308", "-1", "NaN", "+Inf"]),
    st.floats(allow_nan=False).map(repr),
)


def exposition(engine: str, values: list[str], batch_label: str, rounds: int) -> str:
    names = ("drafts", "draft_tokens", "accepted_tokens")
    labels = f'engine="{engine}",model_name="{MODEL}"'
    lines = []
    for name, value in zip(names, values, strict=False):
        lines += [
            f"# TYPE vllm:spec_decode_num_{name}_total counter",
            f"vllm:spec_decode_num_{name}_total{{{labels}}} {value}",
        ]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} 0'
        for i in range(4)
    ]
    probe = probe_text(rounds=rounds).replace('batch_bucket="1"', f'batch_bucket="{batch_label}"')
    return "\n".join(lines) + "\n" + probe


class Polls:
    def __init__(self, bodies: list[str]) -> None:
        self._bodies = bodies

    async def scrape(self) -> Scrape:
        body = self._bodies.pop(0)
        return Scrape(parse(body), duration=0.01, probe=parse_probe(body))


@POLLER_BOUNDED
@given(
    st.lists(
        st.tuples(text_labels, st.lists(written_counts, min_size=3, max_size=3), text_labels),
        min_size=2,
        max_size=4,
    )
)
@example([("0", ["10", "40", "0"], "1"), ("0", ["15", "40", "0"], "1")])
@example([("0", ["1e308", "1e308", "0"], "0+"), ("0", ["1.7e308", "1.7e308", "0"], "²")])
def test_no_poll_is_an_internal_error_and_nothing_exported_is_not_finite(
    polls: list[tuple[str, list[str], str]],
) -> None:
    asyncio.run(poll_and_check(polls))


async def poll_and_check(polls: list[tuple[str, list[str], str]]) -> None:
    bodies = [
        exposition(engine, values, batch, rounds + 1)
        for rounds, (engine, values, batch) in enumerate(polls)
    ]
    poller = Poller(
        Polls(list(bodies)), interval=1, window=60, cost=DraftCost(0.1, "default"), log_interval=60
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SpecDecodeCollector(
            poller.state, cost=DraftCost(0.1, "default"), method=None, interval=1, window=60
        )
    )
    registry.register(SplitCollector(poller.state))
    for _ in bodies:
        await poller.poll_once()
        error = poller.state.last_error
        assert error is None or not error.detail.startswith("internal error"), error.detail
        exported = generate_latest(registry).decode()
        for family in text_string_to_metric_families(exported):
            assert all(math.isfinite(sample.value) for sample in family.samples), family
        state = poller.state
        assert_finite([entry.as_json() for entry in state.report])
        assert_finite([entry.as_json() for entry in state.buckets.values()])
        assert_finite([row.as_json() for row in state.batch_buckets])
        assert_finite(state.coverage)
        json.dumps(  # what /api/report writes: JSON has no NaN or Inf
            [
                *(entry.as_json() for entry in state.report),
                *(entry.as_json() for entry in state.buckets.values()),
                *(row.as_json() for row in state.batch_buckets),
            ],
            allow_nan=False,
        )


@pytest.mark.parametrize("position", ["9" * 10_000, "²", "٣", "65", ""])
def test_a_position_label_that_is_no_position_is_a_parse_failure(position: str) -> None:
    """10,000 ASCII digits passed ``isdigit`` and made ``int()`` raise ValueError: an internal
    error on every poll instead of a ``parse`` failure."""
    body = (
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
        f'position="{position}"}} 1\n'
    )
    with pytest.raises(ExpositionError, match="bad position label"):
        parse(body)


histogram_buckets = st.lists(st.tuples(counts, counts), max_size=6)


@BOUNDED
@given(histogram_buckets, counts, st.floats(-1, 2))
def test_histogram_figures_are_finite_or_none(
    buckets: list[tuple[float, float]], total: float, q: float
) -> None:
    assert_finite(histogram_figures(buckets, total))
    assert_finite([quantile(q, buckets)])


def test_a_histogram_whose_bounds_are_nan_or_repeated_inf_has_no_quantile() -> None:
    """Found by the property above (a random run): a NaN bound with nothing below the rank was
    returned as the quantile."""
    assert quantile(0.0, [(math.nan, 0.0), (0.0, 5e-324)]) is None
    assert_finite(histogram_figures([(math.nan, 0.0), (0.0, 5e-324)], 0.0))
    assert quantile(0.9, [(math.inf, 0.0), (math.inf, 5e-324)]) is None  # two +Inf bounds

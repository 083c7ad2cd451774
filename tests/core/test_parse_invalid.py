"""Values no count can be (NaN, infinite, negative, more accepted than drafted) are left out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specdec_exporter.core import vllm_names as names
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.parse import InvalidSeries, parse
from variants import FIXTURES, MODEL, capture, with_engines

KEY = (MODEL, "0")
T3 = Totals(7380.0, 29520.0, 23194.0, (6690.0, 6047.0, 5476.0, 4981.0), 31030.0)
GENERATION_ONLY = Totals(generation_tokens=31030.0)


def with_value(text: str, sample: str, value: str, engine: str = "0") -> str:
    """The exposition with one sample of one engine set to `value` (as vLLM would write it)."""
    pattern = rf'^({re.escape(sample)}\{{engine="{engine}",[^}}]*\}}) \S+$'
    changed, count = re.subn(pattern, rf"\1 {value}", text, count=1, flags=re.MULTILINE)
    assert count == 1, sample
    return changed


def test_t3_as_captured() -> None:
    parsed = parse(capture("t3"))
    assert parsed.counters == {KEY: T3}
    assert parsed.invalid == ()


@pytest.mark.parametrize(
    ("value", "reason"),
    [("NaN", "nan"), ("+Inf", "infinite"), ("-Inf", "infinite"), ("-1.0", "negative")],
)
@pytest.mark.parametrize("sample", [names.DRAFTS, names.DRAFT_TOKENS, names.ACCEPTED_TOKENS])
def test_a_bad_spec_counter_drops_its_engine_and_keeps_the_rest(
    sample: str, value: str, reason: str
) -> None:
    parsed = parse(with_value(capture("t3"), sample, value))
    assert parsed.counters == {KEY: GENERATION_ONLY}
    assert parsed.spec_series == frozenset() and parsed.generation_series == {KEY}
    assert parsed.invalid == (InvalidSeries(sample, KEY, reason),)  # type: ignore[arg-type]
    assert parsed.num_speculative_tokens(MODEL) is None  # so no k, speedup or break-even


def test_a_bad_position_drops_its_engine() -> None:
    text = capture("t3").replace(
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",'
        f'model_name="{MODEL}",position="2"}} 5476.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",'
        f'model_name="{MODEL}",position="2"}} NaN',
    )
    parsed = parse(text)
    assert parsed.counters == {KEY: GENERATION_ONLY} and parsed.spec_series == frozenset()
    assert parsed.invalid == (InvalidSeries(names.ACCEPTED_PER_POSITION, KEY, "nan"),)


def test_a_bad_generation_counter_drops_only_itself() -> None:
    parsed = parse(with_value(capture("t3"), names.GENERATION_TOKENS, "NaN"))
    assert parsed.counters == {
        KEY: Totals(7380.0, 29520.0, 23194.0, (6690.0, 6047.0, 5476.0, 4981.0))
    }
    assert parsed.spec_series == {KEY} and parsed.generation_series == frozenset()
    assert parsed.invalid == (InvalidSeries(names.GENERATION_TOKENS, KEY, "nan"),)


def test_more_accepted_than_drafted_since_start_is_invalid() -> None:
    parsed = parse(with_value(capture("t3"), names.ACCEPTED_TOKENS, "29521.0"))
    assert parsed.counters == {KEY: GENERATION_ONLY} and parsed.spec_series == frozenset()
    assert parsed.invalid == (InvalidSeries(names.ACCEPTED_TOKENS, KEY, "accepted_over_drafted"),)


def test_as_many_accepted_as_drafted_is_valid() -> None:
    parsed = parse(with_value(capture("t3"), names.ACCEPTED_TOKENS, "29520.0"))
    assert parsed.counters[KEY].accepted_tokens == 29520.0
    assert parsed.invalid == ()


def test_a_position_accepted_more_often_than_drafts_is_invalid() -> None:
    text = with_value(capture("t3"), names.DRAFTS, "6689.0")  # position 0 accepted 6690 times
    parsed = parse(text)
    assert parsed.counters == {KEY: GENERATION_ONLY} and parsed.spec_series == frozenset()
    assert parsed.invalid == (
        InvalidSeries(names.ACCEPTED_PER_POSITION, KEY, "accepted_over_drafted"),
    )


def test_only_the_bad_engine_is_dropped() -> None:
    text = with_value(with_engines(capture("t3"), 2), names.DRAFTS, "NaN", engine="1")
    parsed = parse(text)
    assert parsed.counters == {KEY: T3, (MODEL, "1"): Totals(generation_tokens=62060.0)}
    assert parsed.spec_series == {KEY}
    assert parsed.generation_series == {KEY, (MODEL, "1")}
    assert parsed.invalid == (InvalidSeries(names.DRAFTS, (MODEL, "1"), "nan"),)


def test_a_nan_legacy_v0_gauge_is_left_out() -> None:
    text = (FIXTURES / "vllm-0.7.3/v0_spec_ngram_k4.t3.prom").read_text()
    bad = re.sub(
        r"^(vllm:spec_decode_draft_acceptance_rate\{[^}]*\}) \S+$",
        r"\1 NaN",
        text,
        flags=re.MULTILINE,
    )
    parsed = parse(bad)
    assert parsed.legacy_v0[MODEL].acceptance_rate is None
    assert parsed.legacy_v0[MODEL].efficiency == parse(text).legacy_v0[MODEL].efficiency
    assert parsed.invalid == (InvalidSeries(names.V0_ACCEPTANCE_RATE, KEY, "nan"),)


@pytest.mark.parametrize(
    "path",
    sorted(FIXTURES.glob("**/*.prom")),
    ids=lambda path: str(Path(path).relative_to(FIXTURES)),
)
def test_no_real_capture_has_an_invalid_series(path: Path) -> None:
    assert parse(path.read_text()).invalid == ()

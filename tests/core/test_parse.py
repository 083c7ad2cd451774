"""The parser against every real capture and every rendering variant vLLM produces."""

from __future__ import annotations

import json

import pytest

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.parse import ExpositionError, parse
from variants import (
    FIXTURES,
    MODEL,
    V033,
    capture,
    multiprocess,
    openmetrics,
    underscore,
    with_engines,
)

GROUND_TRUTH = json.loads((V033 / "spec_ngram_k4.ground-truth.json").read_text())
SNAPSHOTS = GROUND_TRUTH["snapshots"]


def expected_counters(cumulative: dict[str, object]) -> Totals:
    return Totals(
        drafts=cumulative["num_drafts"],  # type: ignore[arg-type]
        draft_tokens=cumulative["num_draft_tokens"],  # type: ignore[arg-type]
        accepted_tokens=cumulative["num_accepted_tokens"],  # type: ignore[arg-type]
        accepted_per_position=tuple(cumulative["num_accepted_tokens_per_pos"]),  # type: ignore[arg-type]
        generation_tokens=cumulative["num_generation_tokens"],  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=[s["tag"] for s in SNAPSHOTS])
def test_every_capture_equals_ground_truth(snapshot: dict[str, object]) -> None:
    parsed = parse((V033 / str(snapshot["file"])).read_text())
    cumulative = snapshot["per_engine"]["0"]["cumulative"]  # type: ignore[index]
    assert parsed.spec_decode_enabled
    assert parsed.counters == {(MODEL, "0"): expected_counters(cumulative)}
    assert parsed.spec_series == parsed.generation_series == {(MODEL, "0")}
    assert parsed.num_speculative_tokens(MODEL) == 4


VARIANTS = {
    "multiprocess": multiprocess,
    "underscore": underscore,
    "openmetrics": openmetrics,
    "multiprocess+underscore": lambda text: underscore(multiprocess(text)),
    "openmetrics+underscore": lambda text: underscore(openmetrics(text)),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_parse_to_the_same_snapshot(variant: str) -> None:
    original = parse(capture("t5"))
    assert parse(VARIANTS[variant](capture("t5"))) == original


def test_several_data_parallel_engines() -> None:
    parsed = parse(with_engines(capture("t3"), 4))
    assert sorted(engine for _, engine in parsed.counters) == ["0", "1", "2", "3"]
    assert parsed.counters[(MODEL, "2")] == Totals(
        22140.0, 88560.0, 69582.0, (20070.0, 18141.0, 16428.0, 14943.0), 3 * 31030.0
    )
    assert parsed.counters[(MODEL, "3")].generation_tokens == 4 * 31030.0


def test_label_order_does_not_matter() -> None:
    forward = 'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5\n'
    backward = 'vllm:spec_decode_num_drafts_total{model_name="m",engine="1"} 5\n'
    assert parse(forward) == parse(backward)
    assert parse(forward).counters[("m", "1")].drafts == 5.0


def test_created_gauges_are_never_added_to_counters() -> None:
    parsed = parse(capture("t0"))
    assert parsed.counters[(MODEL, "0")] == Totals(0.0, 0.0, 0.0, (0.0, 0.0, 0.0, 0.0), 0.0)
    assert parsed.spec_series == {(MODEL, "0")}


def test_spec_decoding_off() -> None:
    parsed = parse((V033 / "nospec.t1.prom").read_text())
    assert not parsed.spec_decode_enabled
    assert parsed.counters == {(MODEL, "0"): Totals(generation_tokens=6141.0)}
    assert parsed.spec_series == frozenset()
    assert parsed.generation_series == {(MODEL, "0")}
    assert parsed.models == frozenset({MODEL})


def test_real_cpu_server_capture() -> None:
    capture_file = FIXTURES / "vllm-0.32.0-cpu/metrics/chat_T0p8_nonstream.after.prom"
    parsed = parse(capture_file.read_text())
    positions = (2212.0, 1676.0, 1396.0, 1220.0)
    expected = Totals(3131.0, 12524.0, 6504.0, positions, 9600.0)
    assert parsed.counters == {("tiny-llama", "0"): expected}


V0 = json.loads((FIXTURES / "vllm-0.7.3/v0_spec_ngram_k4.ground-truth.json").read_text())


@pytest.mark.parametrize("snapshot", V0["snapshots"], ids=[s["tag"] for s in V0["snapshots"]])
def test_legacy_v0_never_reports_inflated_counters(snapshot: dict[str, object]) -> None:
    text = (FIXTURES / "vllm-0.7.3" / str(snapshot["file"])).read_text()
    parsed = parse(text)
    assert parsed.spec_series == frozenset()  # V0's counters sum cumulative snapshots
    true_generated = snapshot["cumulative_true"]["generation_tokens"]  # type: ignore[index]
    if true_generated:
        assert parsed.counters == {(MODEL, "0"): Totals(generation_tokens=true_generated)}
    if "vllm:spec_decode_draft_acceptance_rate{" in text:
        gauge_line = next(
            line
            for line in text.splitlines()
            if line.startswith("vllm:spec_decode_draft_acceptance_rate{")
        )
        assert parsed.legacy_v0[MODEL].acceptance_rate == float(gauge_line.split()[-1])
    else:
        assert parsed.legacy_v0 == {}  # V0 shows its spec families only after the first flush


def test_exemplars_and_timestamps_are_ignored() -> None:
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 7 1700000000000'
        ' # {trace_id="abc"} 1.0\n'
    )
    assert parse(text).counters[("m", "0")].drafts == 7.0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "newline"),
        ("<html><body>502 Bad Gateway</body></html>\n", "no vLLM sample"),
        ("\x00\x01garbage\n", "no vLLM sample"),
        (capture("t3")[:2000], "newline"),
        ('vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} abc\n', "unparsable"),
        (
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",'
            'position="x"} 1\n',
            "position",
        ),
        (
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",'
            'position="\u00b2"} 1\n',
            "position",
        ),
    ],
    ids=[
        "empty",
        "html",
        "garbage",
        "truncated",
        "bad-value",
        "bad-position",
        "superscript-position",
    ],
)
def test_bad_bodies_are_rejected_with_a_reason(body: str, message: str) -> None:
    with pytest.raises(ExpositionError, match=message):
        parse(body)


def test_truncated_at_a_line_boundary_inside_the_spec_families() -> None:
    text = capture("t3")
    cut = text.index("vllm:spec_decode_num_draft_tokens_total{")
    truncated = text[:cut] + 'vllm:generation_tokens_total{engine="0",model_name="m"} 1\n'
    with pytest.raises(ExpositionError, match="without samples"):
        parse(truncated)

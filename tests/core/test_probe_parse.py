"""The engine probe's families on vLLM's /metrics -> ProbeSnapshot, literal numbers."""

from __future__ import annotations

import pytest

from probe_text import probe_text
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.parse import ExpositionError
from specdec_exporter.core.probe_parse import NO_PROBE, parse_probe
from specdec_exporter.devtools.sim.probe import SPLIT_OFF_WITHOUT_METRICS
from variants import MODEL, capture

LITERAL = """\
# TYPE specdec_probe_info gauge
specdec_probe_info{batch_split="on",reason="",temperature_split="on",version="0.2.0",vllm_version="0.32.0"} 1.0
specdec_probe_sequences_total{model_name="m",temperature_bucket="0"} 5.0
specdec_probe_sequences_created{model_name="m",temperature_bucket="0"} 1.8e9
specdec_probe_spec_sequences_total{model_name="m",temperature_bucket="0"} 4.0
specdec_probe_drafts_total{model_name="m",temperature_bucket="0"} 10.0
specdec_probe_draft_tokens_total{model_name="m",temperature_bucket="0"} 40.0
specdec_probe_accepted_tokens_total{temperature_bucket="0",model_name="m"} 30.0
specdec_probe_accepted_tokens_per_position_total{model_name="m",position="1",temperature_bucket="0"} 7.0
specdec_probe_accepted_tokens_per_position_total{model_name="m",position="0",temperature_bucket="0"} 9.0
specdec_probe_acceptance_rate_sum{model_name="m",temperature_bucket="0"} 3.0
specdec_probe_acceptance_rate_bucket{le="0.5",model_name="m",temperature_bucket="0"} 1.0
specdec_probe_acceptance_rate_bucket{le="+Inf",model_name="m",temperature_bucket="0"} 4.0
specdec_probe_batch_steps_total{batch_bucket="2-4",engine="1",model_name="m",pid="7"} 6.0
specdec_probe_batch_drafts_total{batch_bucket="2-4",engine="1",model_name="m"} 12.0
specdec_probe_batch_draft_tokens_total{batch_bucket="2-4",engine="1",model_name="m"} 48.0
specdec_probe_batch_accepted_tokens_total{batch_bucket="2-4",engine="1",model_name="m"} 20.0
specdec_probe_errors_total{hook="record"} 0.0
specdec_probe_errors_total{hook="finished"} 2.0
specdec_probe_errors_created{hook="finished"} 1.8e9
specdec_probe_errors_total{hook="finished",pid="8"} 1.0
specdec_probe_errors_total{hook="someone else's"} 5.0
"""  # noqa: E501


def test_literal_counts_in_any_label_order_without_created() -> None:
    probe = parse_probe(LITERAL)
    assert probe.temperature_split and probe.batch_split
    assert probe.info is not None and probe.info.vllm_version == "0.32.0"
    bucket = probe.temperature[("m", "0")]
    assert (bucket.sequences, bucket.spec_sequences) == (5.0, 4.0)
    assert bucket.totals == Totals(10.0, 40.0, 30.0, (9.0, 7.0))
    assert bucket.acceptance_rate is not None
    assert bucket.acceptance_rate.buckets == (("0.5", 1.0), ("+Inf", 4.0))
    assert (bucket.acceptance_rate.sum, bucket.acceptance_rate.count) == (3.0, 4.0)
    assert bucket.ttft is None
    assert probe.batch == {("m", "1", "2-4"): Totals(12.0, 48.0, 20.0, steps=6.0)}
    assert probe.errors == {"record": 0.0, "finished": 3.0}  # summed over API servers


def test_a_vllm_without_the_probe_gives_no_probe() -> None:
    assert parse_probe(capture("t3")) is NO_PROBE
    assert not NO_PROBE.temperature_split


def test_split_off_when_the_probe_says_so() -> None:
    probe = parse_probe(probe_text(temperature_split=False))
    assert probe.info is not None and not probe.temperature_split and probe.batch_split
    assert probe.info.reason == SPLIT_OFF_WITHOUT_METRICS
    assert probe.temperature == {}  # the real probe makes no series for a split that is off


def test_the_multiprocess_rendering_reads_the_same() -> None:
    assert parse_probe(probe_text(multiprocess=True)) == parse_probe(probe_text())


def test_the_simulated_probe_counts_per_sequence() -> None:
    probe = parse_probe(probe_text())
    greedy, hot = probe.temperature[(MODEL, "0")], probe.temperature[(MODEL, "0.7-1.0")]
    assert greedy.sequences == 2 and hot.sequences == 1
    assert greedy.totals == Totals(20.0, 80.0, 63.0, (17.0, 16.0, 15.0, 15.0))
    assert hot.totals == Totals(10.0, 40.0, 9.0, (5.0, 3.0, 1.0, 0.0))
    assert probe.temperature[(MODEL, "1.0+")].sequences == 0  # every bucket pre-created
    assert probe.batch[(MODEL, "0", "2-4")] == Totals(3.0, 12.0, 6.0, steps=1.0)
    assert probe.batch[(MODEL, "0", "33-64")] == Totals(30.0, 120.0, 30.0, steps=1.0)


@pytest.mark.parametrize(
    ("value", "reason"), [("NaN", "nan"), ("+Inf", "infinite"), ("-1.0", "negative")]
)
def test_a_value_no_count_can_be_drops_its_bucket_and_is_listed(value: str, reason: str) -> None:
    text = LITERAL.replace(
        'specdec_probe_drafts_total{model_name="m",temperature_bucket="0"} 10.0',
        f'specdec_probe_drafts_total{{model_name="m",temperature_bucket="0"}} {value}',
    )
    probe = parse_probe(text)
    assert probe.temperature == {}
    assert [(item.name, item.reason) for item in probe.invalid] == [
        ("specdec_probe_drafts_total", reason)
    ]
    assert probe.batch  # another family's series stay


def test_more_accepted_than_drafted_drops_the_bucket() -> None:
    probe = parse_probe(LITERAL.replace("} 30.0", "} 41.0"))
    assert probe.temperature == {}
    assert [item.reason for item in probe.invalid] == ["accepted_over_drafted"]


def test_a_mangled_probe_line_is_an_exposition_error() -> None:
    with pytest.raises(ExpositionError, match="probe"):
        parse_probe('specdec_probe_drafts_total{model_name="m} 1\n')


def test_a_batch_bucket_with_more_accepted_than_drafted_is_dropped() -> None:
    probe = parse_probe(LITERAL.replace("} 20.0", "} 49.0"))
    assert probe.batch == {} and probe.temperature
    assert [(item.name, item.key) for item in probe.invalid] == [
        ("specdec_probe_batch_accepted_tokens", ("m", "1/2-4"))
    ]


def test_the_probe_and_vllm_share_the_position_label_that_one_check_reads() -> None:
    from specdec_exporter.core import probe_names, vllm_names  # noqa: PLC0415

    assert probe_names.POSITION == vllm_names.LABEL_POSITION


def test_the_info_labels_the_sidecar_mirrors_are_bounded() -> None:
    """Whatever vLLM's text carries (not our probe's own 300-character reason): a label value the
    sidecar re-exports keeps at most REASON_LIMIT characters."""
    from specdec_exporter.core.probe_names import REASON_LIMIT  # noqa: PLC0415

    long = "x" * (REASON_LIMIT + 50)
    text = (
        f'specdec_probe_info{{batch_split="on",reason="{long}",temperature_split="off",'
        f'version="{long}",vllm_version="0.32.0"}} 1.0\n'
    )
    info = parse_probe(text).info
    assert info is not None
    assert (len(info.reason), len(info.version), info.vllm_version) == (300, 300, "0.32.0")

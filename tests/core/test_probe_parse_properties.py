"""The probe parser is total (issue 26, sections 2 and 4; Hypothesis): any label text and any value
on any of the probe's sample lines gives a ProbeSnapshot whose every figure is finite and >= 0,
and whose every key has the probe's ASCII shape; any other text gives that or ExpositionError
(the poll fails with reason "parse"), never another exception."""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe_text import probe_text
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.core.parse import ExpositionError
from specdec_exporter.core.probe_parse import (
    _SAMPLE_NAMES,
    HistogramCounts,
    ProbeSnapshot,
    parse_probe,
)

EXAMPLES = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LABELS = (
    names.MODEL,
    names.TEMPERATURE_BUCKET,
    names.BATCH_BUCKET,
    names.ENGINE,
    names.POSITION,
    "le",
    names.HOOK,
    *names.INFO_LABELS,
    "pid",
)
ODD = st.sampled_from(
    ["", "0", "0+", "²", "٣", "1e309", "abc", "+Inf", "-1", "0.5-0.7", "2-4", "65", "x" * 10_000]
)
VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 1.8e308, -1.0, 5e-324]),
)
SEED = probe_text()
BUCKET = re.compile(r"0|[0-9]+(\.[0-9]+)?(-[0-9]+(\.[0-9]+)?|\+)", re.ASCII)
BATCH = re.compile(r"[0-9]+(-[0-9]+|\+)?", re.ASCII)


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(value).replace("inf", "Inf")


LINE = st.builds(
    lambda name, labels, value: (
        name
        + "{"
        + ",".join(f'{key}="{escape(text)}"' for key, text in labels.items())
        + "} "
        + render(value)
    ),
    st.sampled_from(_SAMPLE_NAMES),
    st.dictionaries(st.sampled_from(LABELS), st.one_of(st.text(max_size=30), ODD), max_size=6),
    VALUE,
)


def assert_finite(probe: ProbeSnapshot) -> None:
    figures: list[float] = list(probe.errors.values())
    for (_, bucket), counts in probe.temperature.items():
        assert BUCKET.fullmatch(bucket), bucket
        figures += [counts.sequences, counts.spec_sequences, *counts.totals.accepted_per_position]
        figures += [counts.totals.drafts, counts.totals.draft_tokens, counts.totals.accepted_tokens]
        for histogram in (counts.acceptance_rate, counts.ttft, counts.tpot):
            if isinstance(histogram, HistogramCounts):
                figures += [histogram.sum, *(count for _, count in histogram.buckets)]
                assert all(float(le) == float(le) for le, _ in histogram.buckets)
    for (_, engine, bucket), totals in probe.batch.items():
        assert engine.isascii() and engine.isdigit() and BATCH.fullmatch(bucket), (engine, bucket)
        figures += [totals.drafts, totals.draft_tokens, totals.accepted_tokens, totals.steps]
    assert all(math.isfinite(value) and value >= 0 for value in figures), figures


@EXAMPLES
@given(lines=st.lists(LINE, max_size=12), seed=st.sampled_from([True, False]))
def test_any_label_and_value_on_probe_lines_gives_finite_figures(
    lines: list[str], seed: bool
) -> None:
    text = (SEED if seed else "") + "\n".join(lines) + "\n"
    for labels in (None, TemperatureBuckets().labels):
        assert_finite(parse_probe(text, labels))


@EXAMPLES
@given(text=st.text(max_size=400), prefix=st.sampled_from(_SAMPLE_NAMES))
def test_any_text_gives_a_snapshot_or_a_parse_failure(text: str, prefix: str) -> None:
    for body in (text, f"{prefix}{text}", f"{prefix}{{{text}\n"):
        try:
            probe = parse_probe(body)
        except ExpositionError:
            continue
        assert_finite(probe)


def test_a_histogram_line_with_le_abc_is_a_bad_label_of_that_series() -> None:
    body = probe_text().replace('le="0.05",', 'le="abc",', 1)
    probe = parse_probe(body)
    assert [item.reason for item in probe.invalid] == ["bad_label"]
    assert len(probe.temperature) == len(parse_probe(probe_text()).temperature) - 1

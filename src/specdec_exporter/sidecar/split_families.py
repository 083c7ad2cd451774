"""The engine probe's per-bucket counts as the split's families: the tap's family names and labels,
the probe's counts (cumulative, as vLLM shows them; ``split.SplitCounters`` makes them the
sidecar's continuous counters)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.probe_parse import HistogramCounts, ProbeSnapshot
from specdec_exporter.tap.stats import SPLIT_HELP, TPOT_FAMILY, TTFT_FAMILY

SPLIT_LABELS = [names.MODEL, names.TEMPERATURE_BUCKET]
"""The probe's label names, which the sidecar's split families keep."""


def temperature_families(probe: ProbeSnapshot) -> Iterator[Metric]:
    """The tap's family names, labels and HELP (one text whoever feeds the split), with the
    probe's counts (cumulative, as vLLM shows them)."""
    requests = CounterMetricFamily(
        "specdec_requests",
        SPLIT_HELP["specdec_requests"],
        labels=[*SPLIT_LABELS, "attributed"],
    )
    counters = {
        attribute: CounterMetricFamily(name, SPLIT_HELP[name], labels=SPLIT_LABELS)
        for attribute, name in (
            ("drafts", "specdec_request_drafts"),
            ("draft_tokens", "specdec_request_draft_tokens"),
            ("accepted_tokens", "specdec_request_accepted_tokens"),
        )
    }
    histograms = {
        attribute: HistogramMetricFamily(name, SPLIT_HELP[name], labels=SPLIT_LABELS)
        for attribute, name in (
            ("acceptance_rate", "specdec_request_acceptance_rate"),
            ("ttft", TTFT_FAMILY),
            ("tpot", TPOT_FAMILY),
        )
    }
    for (model, bucket), counts in sorted(probe.temperature.items()):
        labels = [model, bucket]
        requests.add_metric([*labels, "true"], counts.spec_sequences)
        requests.add_metric([*labels, "false"], max(0.0, counts.sequences - counts.spec_sequences))
        for attribute, family in counters.items():
            family.add_metric(labels, getattr(counts.totals, attribute))
        for attribute, histogram_family in histograms.items():
            histogram: HistogramCounts | None = getattr(counts, attribute)
            if histogram is not None:
                histogram_family.add_metric(labels, list(histogram.buckets), histogram.sum)
    yield requests
    yield from counters.values()
    yield from histograms.values()

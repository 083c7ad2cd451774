"""The engine probe's per-bucket counts as the split's families: the tap's family names and labels,
the probe's counts (cumulative, as vLLM shows them; ``split.SplitCounters`` makes them the
sidecar's continuous counters)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.probe_parse import HistogramCounts, ProbeSnapshot

SPLIT_LABELS = [names.MODEL, names.TEMPERATURE_BUCKET]
"""The probe's label names, which the sidecar's split families keep."""
FROM_PROBE = (
    "from the engine probe inside vLLM, per finished sequence (a request with n = 2 is two)"
)


def temperature_families(probe: ProbeSnapshot) -> Iterator[Metric]:
    """The tap's family names and labels, with the probe's counts (mirrored as vLLM shows them)."""
    requests = CounterMetricFamily(
        "specdec_requests",
        f"Requests; {FROM_PROBE}; attributed: vLLM gave the sequence speculative figures.",
        labels=[*SPLIT_LABELS, "attributed"],
    )
    counters = {
        "drafts": CounterMetricFamily(
            "specdec_request_drafts",
            f"Verify steps that had draft tokens, of attributed requests; {FROM_PROBE}.",
            labels=SPLIT_LABELS,
        ),
        "draft_tokens": CounterMetricFamily(
            "specdec_request_draft_tokens",
            f"Draft tokens of attributed requests; {FROM_PROBE}.",
            labels=SPLIT_LABELS,
        ),
        "accepted_tokens": CounterMetricFamily(
            "specdec_request_accepted_tokens",
            f"Accepted draft tokens of attributed requests; {FROM_PROBE}.",
            labels=SPLIT_LABELS,
        ),
    }
    histograms = {
        "acceptance_rate": HistogramMetricFamily(
            "specdec_request_acceptance_rate",
            f"Draft acceptance rate of each attributed request that drafted; {FROM_PROBE}.",
            labels=SPLIT_LABELS,
        ),
        "ttft": HistogramMetricFamily(
            "specdec_request_time_to_first_token_seconds",
            f"Time to first token as vLLM measures it (arrival to first token); {FROM_PROBE}.",
            labels=SPLIT_LABELS,
        ),
        "tpot": HistogramMetricFamily(
            "specdec_request_time_per_output_token_seconds",
            f"Time per output token as vLLM measures it (decode time / (output tokens - 1)); "
            f"{FROM_PROBE}.",
            labels=SPLIT_LABELS,
        ),
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

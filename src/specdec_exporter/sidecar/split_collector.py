"""The temperature split and the load-level split as metric families: the split's counters from
the engine probe's counts on vLLM's /metrics or the request tap's own (one of them at a time,
continuous across a switch: ``split.SplitCounters``), the load level from the probe."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.batch_report import batch_key_order
from specdec_exporter.core.probe_parse import ProbeInfo, ProbeSnapshot
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.sidecar.split import SPLIT_SOURCES

BATCH_LABELS = [names.MODEL, names.ENGINE, names.BATCH_BUCKET]
"""The probe's label names, which the sidecar's load-level families keep."""


class SplitCollector(Collector):
    """``specdec_temperature_split_info`` always; the probe's health as the last successful poll
    saw it; the split's counters (from the probe or the tap) and the probe's batch families while
    the last poll of vLLM succeeded."""

    def __init__(self, state: PollState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        state = self._state
        info = GaugeMetricFamily(
            "specdec_temperature_split_info",
            "Where the specdec_request* families (acceptance by temperature bucket) come from: "
            "probe (the engine probe, on vLLM's /metrics or in its files; wins when both "
            "are on), tap (the "
            "request tap) or none; always 1.",
            labels=["source"],
        )
        assert state.temperature_split_source in SPLIT_SOURCES
        info.add_metric([state.temperature_split_source], 1.0)
        yield info
        seen = state.probe_seen
        if seen.info is not None:
            yield from probe_health_families(seen.info, seen.errors)
        if seen.speculative_config is not None:
            yield speculative_config_family(seen.speculative_config)
        if state.snapshot is None:
            return
        yield from state.split_families
        if state.probe.batch:
            yield from batch_families(state.probe)


def probe_health_families(info: ProbeInfo, errors: Mapping[str, float]) -> Iterator[Metric]:
    """The engine probe's own health as vLLM's /metrics shows it, mirrored under the sidecar's
    job (where the alerts look): which splits are on and why not, and the errors its hooks
    caught."""
    family = GaugeMetricFamily(
        "specdec_engine_probe_info",
        "The engine probe inside vLLM, as the sidecar's last successful poll saw it: its version, "
        "vLLM's, each split on or off, and why one is off (the probe's specdec_probe_info); 1 "
        "while vLLM showed the probe on its last answer.",
        labels=list(names.INFO_LABELS),
    )
    family.add_metric(list(info.label_values()), 1.0)
    yield family
    counted = CounterMetricFamily(
        "specdec_engine_probe_errors",
        "Errors the engine probe caught inside its hooks (counted, never raised into vLLM), "
        "per hook: record (one call per engine step: the load-level split) or finished (one "
        "per finished sequence: the temperature split); the probe's specdec_probe_errors_total.",
        labels=[names.HOOK],
    )
    for hook in sorted(errors):
        counted.add_metric([hook], errors[hook])
    yield counted


def speculative_config_family(config: EngineSpeculativeConfig) -> Metric:
    """vLLM's speculative config as the engine probe read it, mirrored like its health."""
    family = GaugeMetricFamily(
        "specdec_engine_speculative_config_info",
        "vLLM's own speculative configuration as the engine probe read it (the probe's "
        "specdec_probe_speculative_config_info), as the sidecar's last successful poll saw it; "
        "the method the figures rest on when no --speculative-method is given; always 1.",
        labels=list(names.SPECULATIVE_CONFIG_LABELS),
    )
    family.add_metric(list(config.label_values()), 1.0)
    return family


def batch_families(probe: ProbeSnapshot) -> Iterator[Metric]:
    """Per (model, engine, running-batch bucket), as the probe counts them per engine step."""
    families = {
        "steps": CounterMetricFamily(
            "specdec_batch_steps",
            "Engine steps that carried draft tokens, by the running batch of the step "
            "(vLLM's num_running_reqs), from the engine probe.",
            labels=BATCH_LABELS,
        ),
        "drafts": CounterMetricFamily(
            "specdec_batch_drafts",
            "Drafts (requests with draft tokens in a step) by running-batch bucket, from the "
            "engine probe; summed over buckets = vllm:spec_decode_num_drafts_total.",
            labels=BATCH_LABELS,
        ),
        "draft_tokens": CounterMetricFamily(
            "specdec_batch_draft_tokens",
            "Draft tokens by running-batch bucket, from the engine probe; summed over buckets = "
            "vllm:spec_decode_num_draft_tokens_total.",
            labels=BATCH_LABELS,
        ),
        "accepted_tokens": CounterMetricFamily(
            "specdec_batch_accepted_tokens",
            "Accepted draft tokens by running-batch bucket, from the engine probe; summed over "
            "buckets = vllm:spec_decode_num_accepted_tokens_total.",
            labels=BATCH_LABELS,
        ),
    }
    for key, totals in sorted(probe.batch.items(), key=lambda item: batch_key_order(item[0])):
        for attribute, family in families.items():
            family.add_metric(list(key), getattr(totals, attribute))
    yield from families.values()

"""The metric contract the artifacts may rely on: the sidecar's series and the vLLM families used.

Mirrors the exported-metrics table of the sidecar (names, types, labels). A query in a dashboard
or rule that names a `specdec_*` series not listed here is a bug the `--check` reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram"]

TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "container", "endpoint"})
"""Labels Prometheus (and the prometheus-operator) attach to every scraped series."""


@dataclass(frozen=True)
class Metric:
    name: str
    type: MetricType
    labels: frozenset[str]

    def sample_names(self) -> frozenset[str]:
        """The series names a query may use: `_total` for counters, the three histogram series."""
        if self.type == "counter":
            return frozenset({f"{self.name}_total"})
        if self.type == "histogram":
            return frozenset(f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        return frozenset({self.name})

    def allowed_labels(self) -> frozenset[str]:
        extra = {"le"} if self.type == "histogram" else set()
        return self.labels | TARGET_LABELS | extra


def _m(name: str, type_: MetricType, *labels: str) -> Metric:
    return Metric(name, type_, frozenset(labels))


_ENGINE = ("model_name", "engine")
_BUCKET = ("model_name", "temperature_bucket")

_BATCH = (*_ENGINE, "batch_bucket")

SPECDEC_METRICS: tuple[Metric, ...] = (
    _m("specdec_up", "gauge"),
    _m("specdec_vllm_ever_up", "gauge"),
    _m("specdec_draft_cost_ratio", "gauge", "source"),
    _m("specdec_tap_enabled", "gauge"),
    _m("specdec_window_seconds", "gauge"),
    _m("specdec_poll_interval_seconds", "gauge"),
    _m("specdec_scrape_duration_seconds", "gauge"),
    _m("specdec_scrape_failures", "counter", "reason"),
    _m("specdec_probe_files_read_failures", "counter", "reason"),
    _m("specdec_build_info", "gauge", "version"),
    _m("specdec_component_restarts", "counter", "component"),
    _m("specdec_spec_decode_enabled", "gauge", "model_name"),
    _m("specdec_speculative_info", "gauge", "model_name", "method"),
    _m("specdec_drafts", "counter", *_ENGINE),
    _m("specdec_draft_tokens", "counter", *_ENGINE),
    _m("specdec_accepted_tokens", "counter", *_ENGINE),
    _m("specdec_accepted_tokens_per_position", "counter", *_ENGINE, "position"),
    _m("specdec_generation_tokens", "counter", *_ENGINE),
    _m("specdec_num_speculative_tokens", "gauge", "model_name"),
    _m("specdec_estimated_speedup", "gauge", "model_name"),
    _m("specdec_break_even_acceptance_rate", "gauge", "model_name"),
    _m("specdec_requests", "counter", *_BUCKET, "attributed"),
    _m("specdec_request_drafts", "counter", *_BUCKET),
    _m("specdec_request_draft_tokens", "counter", *_BUCKET),
    _m("specdec_request_accepted_tokens", "counter", *_BUCKET),
    _m("specdec_request_acceptance_rate", "histogram", *_BUCKET),
    _m("specdec_request_acceptance_length", "histogram", *_BUCKET),
    _m("specdec_request_time_to_first_token_seconds", "histogram", *_BUCKET),
    _m("specdec_request_time_per_output_token_seconds", "histogram", *_BUCKET),
    _m("specdec_request_coverage_ratio", "gauge", "model_name"),
    _m("specdec_temperature_split_info", "gauge", "source"),
    _m("specdec_batch_steps", "counter", *_BATCH),
    _m("specdec_batch_drafts", "counter", *_BATCH),
    _m("specdec_batch_draft_tokens", "counter", *_BATCH),
    _m("specdec_batch_accepted_tokens", "counter", *_BATCH),
    _m(
        "specdec_engine_probe_info",
        "gauge",
        "version",
        "vllm_version",
        "temperature_split",
        "batch_split",
        "reason",
    ),
    _m("specdec_engine_probe_errors", "counter", "hook"),
    _m(
        "specdec_engine_speculative_config_info",
        "gauge",
        "speculative",
        "method",
        "num_speculative_tokens",
        "draft_model",
        "draft_tensor_parallel_size",
        "num_speculative_tokens_per_batch_size",
        "per_request_metrics",
    ),
)

AWAITED_SPECDEC_METRICS: tuple[Metric, ...] = ()

PROBE_FED = frozenset(
    {
        "specdec_requests_total",
        "specdec_request_drafts_total",
        "specdec_request_draft_tokens_total",
        "specdec_request_accepted_tokens_total",
        *(
            f"{family}_{suffix}"
            for family in (
                "specdec_request_acceptance_rate",
                "specdec_request_time_to_first_token_seconds",
                "specdec_request_time_per_output_token_seconds",
            )
            for suffix in ("bucket", "sum", "count")
        ),
        "specdec_request_coverage_ratio",
    }
)
"""Series the engine probe feeds as well as the tap (sidecar/split_collector.py; a test keeps the
two equal): a title over them names the split, never the tap alone."""
"""Families of a contract the sidecar does not export yet (none now): the dashboard may query
them, and `--check` knows them from here alone. Once the sidecar exports one, it moves to
SPECDEC_METRICS (tests/sidecar/test_metrics_docs.py then checks it against the real exposition)."""

CHECKED_SPECDEC_METRICS = SPECDEC_METRICS + AWAITED_SPECDEC_METRICS
"""Every `specdec_*` family a dashboard or rule may name."""

VLLM_METRICS: tuple[Metric, ...] = (
    _m("vllm:time_to_first_token_seconds", "histogram", *_ENGINE),
    _m("vllm:request_time_per_output_token_seconds", "histogram", *_ENGINE),
    _m("vllm:inter_token_latency_seconds", "histogram", *_ENGINE),
    _m("vllm:e2e_request_latency_seconds", "histogram", *_ENGINE),
)
"""vLLM's own families the dashboards read, scraped by Prometheus straight from vLLM."""


def series_index(metrics: tuple[Metric, ...]) -> dict[str, Metric]:
    """Every usable series name mapped to the metric it belongs to."""
    return {sample: metric for metric in metrics for sample in metric.sample_names()}

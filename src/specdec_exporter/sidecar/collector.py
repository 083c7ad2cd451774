"""Poll state -> Prometheus metric families, built fresh on every collect()."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specdec_exporter import __version__
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import Snapshot
from specdec_exporter.core.report import ALL_ENGINES
from specdec_exporter.sidecar.poller import MAX_MODEL_NAME_CHARS, PollState

MODEL_ENGINE = ["model_name", "engine"]
OVER_THE_WINDOW = (
    "over the sidecar's own window of polls (its length: specdec_window_seconds; vLLM polled "
    "every specdec_poll_interval_seconds)"
)
"""Where a HELP text says what a figure is computed over: settings are series, never HELP text,
so every pod's HELP is the same whatever its settings (Prometheus and Thanos keep one HELP per
family)."""


class SpecDecodeCollector(Collector):
    """Self-health always; vLLM's figures only while the last poll of vLLM succeeded. No HELP text
    depends on a setting: the window, the poll interval and c are series of their own."""

    def __init__(
        self,
        state: PollState,
        *,
        cost: DraftCost,
        method: str | None,
        interval: float,
        window: float,
        coverage_enabled: bool = False,
        restarts: Mapping[str, int] | None = None,
    ) -> None:
        self._state = state
        self._restarts = restarts if restarts is not None else {}
        self._cost = cost
        self._method = method or ""
        self._interval = interval
        self._window = window
        self._coverage_enabled = coverage_enabled

    def collect(self) -> Iterator[Metric]:
        yield from self._self_health()
        snapshot = self._state.snapshot
        if snapshot is not None:
            yield from self._counters(snapshot)
            yield from self._model_gauges(snapshot)
            yield from self._legacy_v0(snapshot)
            if self._coverage_enabled or self._state.temperature_split_source != "none":
                yield self._coverage()

    def _self_health(self) -> Iterator[Metric]:
        state = self._state
        yield GaugeMetricFamily(
            "specdec_up",
            "1 if the last scrape of vLLM succeeded, else 0.",
            value=1.0 if state.up else 0.0,
        )
        yield GaugeMetricFamily(
            "specdec_vllm_ever_up",
            "1 once a scrape of vLLM has succeeded since the sidecar started, else 0 (with "
            "specdec_up 0: vLLM still starting, not gone down).",
            value=1.0 if state.ever_up else 0.0,
        )
        cost = GaugeMetricFamily(
            "specdec_draft_cost_ratio",
            "c: cost of one drafted token relative to one target step, the modelled speedup's "
            "assumption; source: flag, calibration, method (its default; the method from "
            "--speculative-method, else vLLM's config read by the engine probe) or default.",
            labels=["source"],
        )
        current = self._current_cost()
        cost.add_metric([current.source], current.ratio)
        yield cost
        yield GaugeMetricFamily(
            "specdec_tap_enabled",
            "1 if this sidecar runs the request tap (--proxy-listen), else 0: whether requests "
            "may pass through it (the sidecar-down alert's text reads it).",
            value=1.0 if self._coverage_enabled else 0.0,
        )
        yield GaugeMetricFamily(
            "specdec_window_seconds",
            "The sidecar's --window: the span of polls its windowed figures (modelled speedup, "
            "break-even, split coverage) are computed over.",
            value=self._window,
        )
        yield GaugeMetricFamily(
            "specdec_poll_interval_seconds",
            "The sidecar's --interval: seconds between its polls of vLLM's /metrics.",
            value=self._interval,
        )
        if state.scrape_duration is not None:
            yield GaugeMetricFamily(
                "specdec_scrape_duration_seconds",
                "Duration of the last successful scrape of vLLM's /metrics.",
                value=state.scrape_duration,
            )
        yield _counts_by(
            "specdec_scrape_failures",
            "Failed scrapes of vLLM's /metrics, by reason.",
            "reason",
            state.failures.items(),
        )
        if state.probe_files_failures is not None:
            yield _counts_by(
                "specdec_probe_files_read_failures",
                "Polls that could not read the engine probe's files (--probe-dir), by reason: "
                "timeout (no read within --scrape-timeout), error (an OS or decoding error); each "
                "such poll held the probe's last reading.",
                "reason",
                state.probe_files_failures.items(),
            )
        yield _counts_by(
            "specdec_invalid_series",
            "vLLM series left out because no count can be them (NaN, infinite, negative, or more "
            "accepted than drafted since start; of the engine probe's: a label the sidecar cannot "
            "read, or a temperature bucket not among --temperature-buckets), by reason, counted "
            "on each poll that shows them; nothing derived from them is exported.",
            "reason",
            state.invalid_series.items(),
        )
        yield _counts_by(
            "specdec_models_dropped",
            f"Model names vLLM showed that get no per-model tap series, by reason: cap (over "
            f"--max-models), name_too_long (over {MAX_MODEL_NAME_CHARS} characters); each name "
            f'counted once while refused; their requests count as model_name="other".',
            "reason",
            state.models_dropped.items(),
        )
        yield _counts_by(
            "specdec_component_restarts",
            "Times a component of the sidecar (poller, metrics_server, tap) failed and was "
            "restarted after a backoff; the process itself never exits on it (pre-created at 0).",
            "component",
            self._restarts.items(),
        )
        info = GaugeMetricFamily(
            "specdec_build_info", "Build of vllm-specdec-exporter; always 1.", labels=["version"]
        )
        info.add_metric([__version__], 1.0)
        yield info

    def _counters(self, snapshot: Snapshot) -> Iterator[Metric]:
        families = {
            "drafts": (
                "specdec_drafts",
                "Verify steps that carried draft tokens (= vllm:spec_decode_num_drafts_total).",
            ),
            "draft_tokens": (
                "specdec_draft_tokens",
                "Draft tokens proposed (= vllm:spec_decode_num_draft_tokens_total).",
            ),
            "accepted_tokens": (
                "specdec_accepted_tokens",
                "Draft tokens accepted (= vllm:spec_decode_num_accepted_tokens_total).",
            ),
        }
        spec = sorted(item for item in snapshot.counters.items() if item[0] in snapshot.spec_series)
        for attribute, (name, help_text) in families.items():
            family = CounterMetricFamily(name, help_text, labels=MODEL_ENGINE)
            for (model, engine), counters in spec:
                family.add_metric([model, engine], getattr(counters, attribute))
            yield family
        per_position = CounterMetricFamily(
            "specdec_accepted_tokens_per_position",
            "Draft tokens accepted at each position (= vllm:spec_decode_num_accepted_tokens_per_pos"
            "_total).",
            labels=[*MODEL_ENGINE, "position"],
        )
        for (model, engine), counters in spec:
            for position, value in enumerate(counters.accepted_per_position):
                per_position.add_metric([model, engine, str(position)], value)
        yield per_position
        generation = CounterMetricFamily(
            "specdec_generation_tokens",
            "Output tokens generated (= vllm:generation_tokens_total).",
            labels=MODEL_ENGINE,
        )
        for (model, engine), counters in sorted(snapshot.counters.items()):
            if (model, engine) in snapshot.generation_series:
                generation.add_metric([model, engine], counters.generation_tokens)
        yield generation

    def _model_gauges(self, snapshot: Snapshot) -> Iterator[Metric]:
        method = self._current_method()
        enabled = GaugeMetricFamily(
            "specdec_spec_decode_enabled",
            "1 if vLLM exposes speculative-decoding families, else 0.",
            labels=["model_name"],
        )
        info = GaugeMetricFamily(
            "specdec_speculative_info",
            "The speculative method per model: the sidecar's --speculative-method, else vLLM's "
            "own config read by the engine probe (empty if neither); always 1.",
            labels=["model_name", "method"],
        )
        k_family = GaugeMetricFamily(
            "specdec_num_speculative_tokens",
            "k: draft tokens per step, from vLLM's per-position series.",
            labels=["model_name"],
        )
        speedup = GaugeMetricFamily(
            "specdec_estimated_speedup",
            "Modelled speedup over plain decoding, L/(1+k*c), L = mean acceptance length "
            f"{OVER_THE_WINDOW}, c = specdec_draft_cost_ratio; absent without drafts in the "
            "window.",
            labels=["model_name"],
        )
        break_even = GaugeMetricFamily(
            "specdec_break_even_acceptance_rate",
            "Modelled acceptance rate (accepted / draft tokens) at which the modelled speedup is "
            f"1: k*c / (draft tokens / drafts) {OVER_THE_WINDOW}, c (specdec_draft_cost_ratio) "
            "when every draft is k tokens long. Above 1, no acceptance pays.",
            labels=["model_name"],
        )
        aggregates = {e.model_name: e for e in self._state.report if e.engine == ALL_ENGINES}
        for model in sorted(snapshot.models):
            enabled.add_metric([model], 1.0 if snapshot.spec_decode_enabled else 0.0)
            info.add_metric([model, method], 1.0)
            k = snapshot.num_speculative_tokens(model)
            if k is None:
                continue
            k_family.add_metric([model], k)
            row = aggregates.get(model)
            if row is None:
                continue
            if row.estimated_speedup is not None:
                speedup.add_metric([model], row.estimated_speedup)
            if row.break_even_acceptance_rate is not None:
                break_even.add_metric([model], row.break_even_acceptance_rate)
        yield from (enabled, info, k_family, speedup, break_even)

    def _current_cost(self) -> DraftCost:
        """c as the last poll resolved it (the method may come from vLLM's config), else the
        fixed one."""
        speculative = self._state.speculative
        return self._cost if speculative is None else speculative.cost

    def _current_method(self) -> str:
        speculative = self._state.speculative
        return self._method if speculative is None else speculative.method or ""

    def _legacy_v0(self, snapshot: Snapshot) -> Iterator[Metric]:
        if not snapshot.legacy_v0:
            return
        rate = GaugeMetricFamily(
            "specdec_legacy_v0_draft_acceptance_rate",
            "vLLM V0 only: its own acceptance rate, cumulative since start as of its last flush "
            "(V0's counters are inflated and are not re-exported).",
            labels=["model_name"],
        )
        efficiency = GaugeMetricFamily(
            "specdec_legacy_v0_system_efficiency",
            "vLLM V0 only: its own system efficiency, cumulative since start as of its last flush.",
            labels=["model_name"],
        )
        for model, gauges in sorted(snapshot.legacy_v0.items()):
            if gauges.acceptance_rate is not None:
                rate.add_metric([model], gauges.acceptance_rate)
            if gauges.efficiency is not None:
                efficiency.add_metric([model], gauges.efficiency)
        yield from (rate, efficiency)

    def _coverage(self) -> Metric:
        family = GaugeMetricFamily(
            "specdec_request_coverage_ratio",
            "Draft tokens attributed to a temperature bucket by the split's source (engine probe "
            "or request tap, specdec_temperature_split_info) / draft tokens counted by vLLM "
            f"{OVER_THE_WINDOW}; below 1: requests still running, aborted or ended by a stop "
            "string, vLLM's --per-request-spec-decode-metrics off, or with the tap: traffic "
            "bypassing it, n > 1, streams without include_usage. Above 1 for a while: a "
            "sequence's draft tokens are attributed when it finishes, vLLM counts them as they "
            "are drafted, so sequences that began before the window and finish in it add more "
            "than vLLM counted in it.",
            labels=["model_name"],
        )
        for model, value in sorted(self._state.coverage.items()):
            family.add_metric([model], value)
        return family


def _counts_by(
    name: str, documentation: str, label: str, counts: Iterable[tuple[str, int]]
) -> CounterMetricFamily:
    """A counter family with one sample per (label value, count) of ``counts``."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for value, count in counts:
        family.add_metric([value], count)
    return family

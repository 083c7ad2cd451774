"""The simulator's /metrics: vLLM's families in a fresh prometheus_client registry per (re)start,
updated from engine events, rendered as vLLM renders them (single- or multi-process, name spelling).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    Summary,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specdec_exporter.devtools.sim.families import (
    CACHE_CONFIG_HELP,
    CACHE_CONFIG_INFO,
    CACHE_CONFIG_LABELS,
    FAMILIES,
    SPEC_ACCEPTED,
    SPEC_ACCEPTED_PER_POS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    Family,
    bucket_edges,
)
from specdec_exporter.devtools.sim.probe import (
    ProbeSeries,
    engine_speculative_config,
    split_problems,
)
from specdec_exporter.devtools.sim.settings import VLLM_VERSION, MetricNames, SimConfig

CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
MULTIPROCESS_KIND_ORDER = ("histogram", "gauge", "counter", "summary")


@dataclass
class Metrics:
    """The registry's metric objects by family name, one dict per type (for typed access)."""

    counters: dict[str, Counter] = field(default_factory=dict)
    gauges: dict[str, Gauge] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    summaries: dict[str, Summary] = field(default_factory=dict)


@dataclass(frozen=True)
class Finished:
    """What vLLM records about one engine request when it finishes (times in seconds)."""

    reason: str
    prompt_tokens: int
    generation_tokens: int
    max_tokens: int
    n: int
    queue: float
    prefill: float
    decode: float
    inference: float
    e2e: float


class EngineSeries:
    """Pre-bound children for one engine: the hot path touches only these."""

    def __init__(self, metrics: Metrics, engine: str, model: str, k_max: int) -> None:
        def counter(name: str, **extra: str) -> Counter:
            return metrics.counters[name].labels(model_name=model, engine=engine, **extra)

        def histogram(name: str) -> Histogram:
            return metrics.histograms[f"vllm:{name}"].labels(model_name=model, engine=engine)

        def gauge(name: str, **extra: str) -> Gauge:
            return metrics.gauges[name].labels(model_name=model, engine=engine, **extra)

        self.spec = SPEC_DRAFTS in metrics.counters
        if self.spec:
            self.drafts = counter(SPEC_DRAFTS)
            self.draft_tokens = counter(SPEC_DRAFT_TOKENS)
            self.accepted = counter(SPEC_ACCEPTED)
            self.accepted_per_pos = [
                counter(SPEC_ACCEPTED_PER_POS, position=str(pos)) for pos in range(k_max)
            ]
        self.prompt_tokens = counter("vllm:prompt_tokens")
        self.prompt_local = counter("vllm:prompt_tokens_by_source", source="local_compute")
        self.prefix_queries = counter("vllm:prefix_cache_queries")
        self.generation_tokens = counter("vllm:generation_tokens")
        self.success = {
            reason: counter("vllm:request_success", finished_reason=reason)
            for reason in FINISH_REASONS
        }
        self.running = gauge("vllm:num_requests_running")
        self.waiting = gauge("vllm:num_requests_waiting")
        self.waiting_capacity = gauge("vllm:num_requests_waiting_by_reason", reason="capacity")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc")
        gauge("vllm:engine_sleep_state", sleep_state="awake").set(1)
        self.ttft = histogram("time_to_first_token_seconds")
        self.itl = histogram("inter_token_latency_seconds")
        self.iteration_tokens = histogram("iteration_tokens_total")
        self.finished_histograms = {
            name: histogram(name)
            for name in (
                "request_prompt_tokens",
                "request_generation_tokens",
                "request_max_num_generation_tokens",
                "request_params_n",
                "request_params_max_tokens",
                "request_time_per_output_token_seconds",
                "e2e_request_latency_seconds",
                "request_queue_time_seconds",
                "request_inference_time_seconds",
                "request_prefill_time_seconds",
                "request_decode_time_seconds",
                "request_num_preemptions",
                "request_prefill_kv_computed_tokens",
            )
        }

    def record_prefill(self, prompt_tokens: int) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.prompt_local.inc(prompt_tokens)
        self.prefix_queries.inc(prompt_tokens)

    def record_step(
        self,
        drafts: int,
        draft_tokens: int,
        accepted_per_pos: Sequence[int],
        generation_tokens: int,
        iteration_tokens: int,
    ) -> None:
        """Counters of one engine step; the spec counters move only when something was drafted."""
        if drafts and self.spec:
            self.drafts.inc(drafts)
            self.draft_tokens.inc(draft_tokens)
            self.accepted.inc(sum(accepted_per_pos))
            for child, count in zip(self.accepted_per_pos, accepted_per_pos, strict=False):
                if count:
                    child.inc(count)
        if generation_tokens:
            self.generation_tokens.inc(generation_tokens)
        self.iteration_tokens.observe(iteration_tokens)

    def set_load(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.waiting_capacity.set(waiting)
        self.kv_usage.set(kv_usage)

    def record_finish(self, done: Finished) -> None:
        self.success[done.reason].inc()
        tpot = done.decode / (done.generation_tokens - 1) if done.generation_tokens > 1 else 0.0
        values = {
            "request_prompt_tokens": done.prompt_tokens,
            "request_generation_tokens": done.generation_tokens,
            "request_max_num_generation_tokens": done.max_tokens,
            "request_params_n": done.n,
            "request_params_max_tokens": done.max_tokens,
            "request_time_per_output_token_seconds": tpot,
            "e2e_request_latency_seconds": done.e2e,
            "request_queue_time_seconds": done.queue,
            "request_inference_time_seconds": done.inference,
            "request_prefill_time_seconds": done.prefill,
            "request_decode_time_seconds": done.decode,
            "request_num_preemptions": 0,
            "request_prefill_kv_computed_tokens": done.prompt_tokens,
        }
        for name, value in values.items():
            self.finished_histograms[name].observe(value)


class HttpSeries:
    """prometheus-fastapi-instrumentator's families, as vLLM mounts it."""

    def __init__(self, metrics: Metrics) -> None:
        self.requests = metrics.counters["http_requests"]
        self.request_size = metrics.summaries["http_request_size_bytes"]
        self.response_size = metrics.summaries["http_response_size_bytes"]
        self.duration_highr = metrics.histograms["http_request_duration_highr_seconds"]
        self.duration = metrics.histograms["http_request_duration_seconds"]

    def record(
        self,
        handler: str,
        method: str,
        *,
        status: int,
        request_bytes: int,
        response_bytes: int,
        seconds: float,
    ) -> None:
        self.requests.labels(handler=handler, method=method, status=f"{status // 100}xx").inc()
        self.request_size.labels(handler=handler).observe(request_bytes)
        self.response_size.labels(handler=handler).observe(response_bytes)
        self.duration_highr.observe(seconds)
        self.duration.labels(handler=handler, method=method).observe(seconds)


class SimulatedProcess(Collector):
    """process_* of this process, with the simulated vLLM's start time (renewed on restart)."""

    def __init__(self, start_time: float) -> None:
        self._inner = ProcessCollector(registry=None)
        self._start_time = start_time

    def collect(self) -> Iterable[Metric]:
        for family in self._inner.collect():
            if family.name == "process_start_time_seconds":
                yield GaugeMetricFamily(family.name, family.documentation, value=self._start_time)
            else:
                yield family


class Telemetry:
    """One generation of vLLM's metrics: created at start-up, replaced whole on a restart."""

    def __init__(self, config: SimConfig, start_time: float) -> None:
        self.config = config
        self.registry = CollectorRegistry(auto_describe=False)
        if not config.multiprocess_metrics:
            GCCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            self.registry.register(SimulatedProcess(start_time))
        self.metrics = Metrics()
        for family in FAMILIES:
            if family.spec and config.speculative is None:
                continue
            if family.scope == "http":
                self._register_http(family)
            else:
                self._register_vllm(family)
            if family.name == "vllm:request_prefill_kv_computed_tokens":
                self._register_cache_config_info()
        names = [str(index) for index in range(config.data_parallel_size)]
        self.engines = [
            EngineSeries(self.metrics, name, config.served_model_name, config.k_max)
            for name in names
        ]
        self.http = HttpSeries(self.metrics)
        self.probe = (
            ProbeSeries(
                self.registry,
                model=config.served_model_name,
                vllm_version=VLLM_VERSION,
                problems=split_problems(
                    config.speculative is not None, config.per_request_spec_decode_metrics != "none"
                ),
                engines=config.data_parallel_size,
                positions=config.k_max,
                speculative_config=engine_speculative_config(
                    config.speculative, config.per_request_spec_decode_metrics
                ),
            )
            if config.probe
            else None
        )

    def _register_vllm(self, family: Family) -> None:
        labelnames = (*family.labels, "model_name", *(("engine",) if family.per_engine else ()))
        metric = self._create(family, labelnames)
        engines = (
            [str(i) for i in range(self.config.data_parallel_size)] if family.per_engine else [None]
        )
        for values in self._presets(family):
            for engine in engines:
                labels = dict(zip(family.labels, values, strict=True))
                labels["model_name"] = self.config.served_model_name
                if engine is not None:
                    labels["engine"] = engine
                metric.labels(**labels)

    def _presets(self, family: Family) -> Iterator[tuple[str, ...]]:
        if family.name == SPEC_ACCEPTED_PER_POS:
            return iter(())  # created by EngineSeries, engine by engine
        return iter(family.presets or [()])

    def _register_http(self, family: Family) -> None:
        self._create(family, family.labels)

    def _create(
        self, family: Family, labelnames: Sequence[str]
    ) -> Counter | Gauge | Histogram | Summary:
        kwargs = {"labelnames": labelnames, "registry": self.registry}
        if family.kind == "counter":
            counter = Counter(family.name, family.help, **kwargs)  # type: ignore[arg-type]
            self.metrics.counters[family.name] = counter
            return counter
        if family.kind == "gauge":
            gauge = Gauge(family.name, family.help, **kwargs)  # type: ignore[arg-type]
            self.metrics.gauges[family.name] = gauge
            return gauge
        if family.kind == "summary":
            summary = Summary(family.name, family.help, **kwargs)  # type: ignore[arg-type]
            self.metrics.summaries[family.name] = summary
            return summary
        edges = bucket_edges(family, self.config.max_model_len)
        histogram = Histogram(family.name, family.help, buckets=edges, **kwargs)  # type: ignore[arg-type]
        self.metrics.histograms[family.name] = histogram
        return histogram

    def _register_cache_config_info(self) -> None:
        labelnames = sorted([*CACHE_CONFIG_LABELS, "engine"])
        info = Gauge(
            CACHE_CONFIG_INFO, CACHE_CONFIG_HELP, labelnames=labelnames, registry=self.registry
        )
        for engine in range(self.config.data_parallel_size):
            info.labels(engine=str(engine), **CACHE_CONFIG_LABELS).set(1)

    def render(self) -> bytes:
        """The /metrics body, as this configuration of vLLM would write it."""
        source: CollectorRegistry | MultiprocessView = self.registry
        if self.config.multiprocess_metrics:
            source = MultiprocessView(self.registry)
        return spell_names(generate_latest(source), self.config.metric_names)


class MultiprocessView(Collector):
    """The registry as prometheus_client's MultiProcessCollector renders it (several API servers).

    No ``_created`` samples, no process/python families, families grouped by type the way the
    per-type files of PROMETHEUS_MULTIPROC_DIR are read back (histograms, gauges, counters,
    summaries; the real order follows the directory listing), and each histogram series written
    as ``_sum``, the ``_bucket`` lines, then ``_count``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        families = [
            f for f in self._registry.collect() if not f.name.startswith(("process_", "python_"))
        ]
        for kind in MULTIPROCESS_KIND_ORDER:
            for family in families:
                if family.type == kind:
                    yield multiprocess_family(family)


def multiprocess_family(family: Metric) -> Metric:
    rebuilt = Metric(family.name, family.documentation, family.type)
    samples = [s for s in family.samples if not s.name.endswith("_created")]
    if family.type != "histogram":
        rebuilt.samples = samples
        return rebuilt
    series: dict[tuple[tuple[str, str], ...], list[object]] = {}
    for sample in samples:
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        series.setdefault(key, []).append(sample)
    for group in series.values():
        rank = {"_sum": 0, "_bucket": 1, "_count": 2}
        group.sort(key=lambda s: rank[s.name[len(family.name) :]])  # type: ignore[attr-defined]
        rebuilt.samples.extend(group)  # type: ignore[arg-type]
    return rebuilt


_SAMPLE_COLON = re.compile(rb"^vllm:", re.MULTILINE)
_ANY_COLON = re.compile(rb"^(# HELP |# TYPE )?vllm:", re.MULTILINE)


def spell_names(body: bytes, spelling: MetricNames) -> bytes:
    """colon: as vLLM writes; underscore: every vllm: name as vllm_; mixed: only sample lines."""
    if spelling == "underscore":
        return _ANY_COLON.sub(rb"\1vllm_", body)
    if spelling == "mixed":
        return _SAMPLE_COLON.sub(b"vllm_", body)
    return body

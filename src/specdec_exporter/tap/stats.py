"""Per-request acceptance by temperature bucket, as Prometheus families (a custom collector).

The proxy calls ``record`` once per finished request; ``collect`` builds fresh families each scrape.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from specdec_exporter.core.acceptance import acceptance_rate, mean_acceptance_length
from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.core.histogram_bounds import ACCEPTANCE_RATE_BOUNDS, TPOT_BOUNDS, TTFT_BOUNDS
from specdec_exporter.tap.spec import SpecDecodeSummary

BUCKET_LABELS = ("model_name", "temperature_bucket")
TTFT_FAMILY = "specdec_request_time_to_first_token_seconds"
TPOT_FAMILY = "specdec_request_time_per_output_token_seconds"

_SOURCE = (
    "from the temperature split's source (specdec_temperature_split_info): the engine probe "
    "counts finished sequences (n = 2 is two), the request tap the requests through it"
)
SPLIT_HELP = {
    "specdec_requests": f"Requests per temperature bucket, {_SOURCE}; attributed: vLLM gave "
    "their speculative-decoding figures.",
    "specdec_request_drafts": "Verify steps that had draft tokens (num_spec_steps) of attributed "
    f"requests, {_SOURCE}.",
    "specdec_request_draft_tokens": f"Draft tokens of attributed requests, {_SOURCE}.",
    "specdec_request_accepted_tokens": f"Accepted draft tokens of attributed requests, {_SOURCE}.",
    "specdec_request_acceptance_rate": "Draft acceptance rate (accepted / draft tokens) of each "
    f"attributed request that drafted, {_SOURCE}.",
    "specdec_request_acceptance_length": "Mean acceptance length (1 + accepted tokens / drafts) "
    "of each attributed request that drafted; the request tap only.",
    TTFT_FAMILY: "Time to first token: as vLLM measures it (arrival to first token) with the "
    "engine probe; streaming requests as the client sees them through the request tap (the "
    "request's last byte to the first response byte).",
    TPOT_FAMILY: "Time per output token: (last token - first token) / (output tokens - 1), as "
    "vLLM times them with the engine probe, as the client sees streaming responses through the "
    "request tap.",
}
"""One HELP per family of the temperature split, whichever source feeds it: Prometheus and Thanos
keep one HELP per family across targets, and pods may differ in source."""
"""The per-bucket latency histograms (the live page reads them back by these names)."""


def acceptance_length_bounds(k: int) -> tuple[float, ...]:
    """1, 1.25, ..., k+1: mean acceptance length counts the bonus token, so it lies in [1, k+1]."""
    return tuple(1 + 0.25 * step for step in range(4 * k + 1))


class RequestRecord(NamedTuple):
    """One finished request as the proxy saw it. ``spec`` None: not attributed.

    One per request: a NamedTuple, cheaper to build than a frozen dataclass."""

    model_name: str
    temperature_bucket: str
    spec: SpecDecodeSummary | None
    time_to_first_token: float | None = None
    time_per_output_token: float | None = None


@dataclass(frozen=True, slots=True)
class BucketSummary:
    """Totals of one (model, temperature bucket) since start."""

    model_name: str
    temperature_bucket: str
    requests: int
    attributed: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance_rate(self.accepted_tokens, self.draft_tokens)

    @property
    def mean_acceptance_length(self) -> float | None:
        return mean_acceptance_length(self.accepted_tokens, self.drafts)


class Histogram:
    """Cumulative-on-read histogram with fixed upper bounds (``le`` inclusive)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        running, rows = 0, []
        for bound, count in zip(
            (*map(floatToGoString, self.bounds), "+Inf"), self.counts, strict=True
        ):
            running += count
            rows.append((bound, float(running)))
        return rows


@dataclass(slots=True)
class _Series:
    """Everything kept for one (model, bucket)."""

    attributed: int = 0
    unattributed: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_rate: Histogram = field(default_factory=lambda: Histogram(ACCEPTANCE_RATE_BOUNDS))
    acceptance_length: Histogram | None = None
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BOUNDS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BOUNDS))


class RequestStats(Collector):
    """Owns the ``specdec_request*`` families; bounded: models x (bucket labels + 2) series sets.

    ``num_speculative_tokens(model)`` gives k for the acceptance-length buckets; when it says
    None, the first attributed response's ``num_spec_tokens`` decides, and the model's
    acceptance-length series appear from then on (k is fixed for the process's life).
    """

    def __init__(
        self,
        buckets: TemperatureBuckets,
        num_speculative_tokens: Callable[[str], int | None],
    ) -> None:
        self.buckets = buckets
        self._num_speculative_tokens = num_speculative_tokens
        self._series: dict[tuple[str, str], _Series] = {}
        self._k: dict[str, int] = {}
        self._lock = threading.Lock()

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def add_model(self, model_name: str) -> None:
        """Create the series of every temperature bucket of a model at 0 (idempotent)."""
        with self._lock:
            for label in self.buckets.labels:
                self._series_for(model_name, label)

    def retain_models(self, models: Collection[str]) -> None:
        """Forget every model not in ``models``: its series leave /metrics (bounded labels)."""
        with self._lock:
            for key in [key for key in self._series if key[0] not in models]:
                del self._series[key]
            for model in [model for model in self._k if model not in models]:
                del self._k[model]

    def reset(self) -> None:
        """Every count back to zero (the series go until the next request or ``add_model``):
        the sidecar calls it when the engine probe stops being the split's source, so the tap
        never exports a request the probe counted."""
        with self._lock:
            self._series.clear()

    def record(self, request: RequestRecord) -> None:
        with self._lock:
            if (request.model_name, request.temperature_bucket) not in self._series:
                for label in self.buckets.labels:
                    self._series_for(request.model_name, label)
            series = self._series_for(request.model_name, request.temperature_bucket)
            if request.spec is None:
                series.unattributed += 1
            else:
                self._add_spec(request.model_name, series, request.spec)
            if request.time_to_first_token is not None:
                series.ttft.observe(request.time_to_first_token)
            if request.time_per_output_token is not None:
                series.tpot.observe(request.time_per_output_token)

    def attributed_draft_tokens(self, model_name: str) -> int:
        with self._lock:
            return sum(
                series.draft_tokens
                for (model, _), series in self._series.items()
                if model == model_name
            )

    def bucket_summary(self) -> list[BucketSummary]:
        with self._lock:
            return [
                BucketSummary(
                    model,
                    bucket,
                    series.attributed + series.unattributed,
                    series.attributed,
                    series.drafts,
                    series.draft_tokens,
                    series.accepted_tokens,
                )
                for (model, bucket), series in self._series.items()
            ]

    def _series_for(self, model_name: str, bucket: str) -> _Series:
        series = self._series.get((model_name, bucket))
        if series is None:
            series = self._series[(model_name, bucket)] = _Series()
            self._resolve_k(model_name, None)
        return series

    def _resolve_k(self, model_name: str, spec_tokens: int | None) -> None:
        """Fix k for a model once known, and give its series their acceptance-length buckets."""
        k = self._k.get(model_name)
        if k is None:
            try:
                k = self._num_speculative_tokens(model_name)
            except Exception:  # the poller's k callback must not break a scrape or a request
                k = None
            k = k or spec_tokens
            if k is None or k <= 0:
                return
            self._k[model_name] = k
        for (model, _), series in self._series.items():
            if model == model_name and series.acceptance_length is None:
                series.acceptance_length = Histogram(acceptance_length_bounds(k))

    def _add_spec(self, model_name: str, series: _Series, spec: SpecDecodeSummary) -> None:
        series.attributed += 1
        series.drafts += spec.spec_steps
        series.draft_tokens += spec.draft_tokens
        series.accepted_tokens += spec.accepted_tokens
        if spec.acceptance_rate is not None:
            series.acceptance_rate.observe(spec.acceptance_rate)
        if series.acceptance_length is None:
            self._resolve_k(model_name, spec.spec_tokens)
        if series.acceptance_length is not None and spec.acceptance_length is not None:
            series.acceptance_length.observe(spec.acceptance_length)

    def describe(self) -> Iterable[Metric]:
        return _Families.empty().all()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self._resolve_pending_k()
            families = _Families.empty()
            for (model, bucket), series in sorted(self._series.items()):
                families.add(model, bucket, series)
        return iter(families.all())

    def _resolve_pending_k(self) -> None:
        for model in {model for model, _ in self._series if model not in self._k}:
            self._resolve_k(model, None)


def _counter(name: str, labels: Sequence[str] = BUCKET_LABELS) -> CounterMetricFamily:
    return CounterMetricFamily(name, SPLIT_HELP[name], labels=labels)


def _histogram(name: str) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, SPLIT_HELP[name], labels=BUCKET_LABELS)


@dataclass(slots=True)
class _Families:
    """The eight families of one scrape."""

    requests: CounterMetricFamily
    drafts: CounterMetricFamily
    draft_tokens: CounterMetricFamily
    accepted_tokens: CounterMetricFamily
    acceptance_rate: HistogramMetricFamily
    acceptance_length: HistogramMetricFamily
    ttft: HistogramMetricFamily
    tpot: HistogramMetricFamily

    @classmethod
    def empty(cls) -> _Families:
        return cls(
            _counter("specdec_requests", labels=(*BUCKET_LABELS, "attributed")),
            _counter("specdec_request_drafts"),
            _counter("specdec_request_draft_tokens"),
            _counter("specdec_request_accepted_tokens"),
            _histogram("specdec_request_acceptance_rate"),
            _histogram("specdec_request_acceptance_length"),
            _histogram(TTFT_FAMILY),
            _histogram(TPOT_FAMILY),
        )

    def all(self) -> list[Metric]:
        return [
            self.requests,
            self.drafts,
            self.draft_tokens,
            self.accepted_tokens,
            self.acceptance_rate,
            self.acceptance_length,
            self.ttft,
            self.tpot,
        ]

    def add(self, model: str, bucket: str, series: _Series) -> None:
        labels = [model, bucket]
        self.requests.add_metric([*labels, "true"], series.attributed)
        self.requests.add_metric([*labels, "false"], series.unattributed)
        self.drafts.add_metric(labels, series.drafts)
        self.draft_tokens.add_metric(labels, series.draft_tokens)
        self.accepted_tokens.add_metric(labels, series.accepted_tokens)
        histograms = (
            (self.acceptance_rate, series.acceptance_rate),
            (self.acceptance_length, series.acceptance_length),
            (self.ttft, series.ttft),
            (self.tpot, series.tpot),
        )
        for family, histogram in histograms:
            if histogram is not None:
                family.add_metric(labels, histogram.buckets(), histogram.total)

"""The probe's metric families on vLLM's /metrics: created once per process, series made up front.

``prometheus_client`` objects in its default registry, which vLLM's /metrics serves; under
``PROMETHEUS_MULTIPROC_DIR`` (``--api-server-count`` > 1) each API-server process writes its own
files and vLLM's multiprocess collector sums them. Every series of a model is created at 0 when the
model is first seen (a fixed number per model, see docs/probe.md), so a scrape shows the whole set
before the first request and a rate over a fresh series starts from 0.
"""

from __future__ import annotations

import contextlib
import math
import threading
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import REGISTRY

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.histogram_bounds import ACCEPTANCE_RATE_BOUNDS, TPOT_BOUNDS, TTFT_BOUNDS
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.probe import hooks
from specdec_exporter.probe.counting import SequenceFigures

ERROR_LOG_INTERVAL = 600
"""Seconds between two log lines for one hook's errors (the counter has every one)."""

TEMPERATURE_LABELS = (names.MODEL, names.TEMPERATURE_BUCKET)
BATCH_LABELS = (names.MODEL, names.ENGINE, names.BATCH_BUCKET)

HELP = {
    names.SEQUENCES: (
        "Finished sequences, per sampled sequence: a request with n = 2 is two, each prompt of "
        "a prompt list is one."
    ),
    names.SPEC_SEQUENCES: (
        "Finished sequences that carried vLLM's per-sequence speculative figures "
        "(--per-request-spec-decode-metrics)."
    ),
    names.DRAFTS: "Verify steps with draft tokens of finished sequences (vLLM's num_drafts).",
    names.DRAFT_TOKENS: "Draft tokens proposed for finished sequences (vLLM's num_draft_tokens).",
    names.ACCEPTED_TOKENS: (
        "Draft tokens accepted for finished sequences (vLLM's num_accepted_tokens)."
    ),
    names.ACCEPTED_PER_POSITION: (
        "Draft tokens accepted at each position for finished sequences "
        "(vLLM's num_accepted_tokens_per_pos)."
    ),
    names.ACCEPTANCE_RATE: (
        "Draft acceptance rate (accepted / draft tokens) of each finished sequence that drafted."
    ),
    names.TTFT: (
        "Time to first token of each finished sequence, the value vLLM observes into "
        "vllm:time_to_first_token_seconds."
    ),
    names.TPOT: (
        "Mean time per output token of each finished sequence, the value vLLM observes into "
        "vllm:request_time_per_output_token_seconds."
    ),
    names.BATCH_STEPS: (
        "Engine steps with draft tokens, by the number of running requests vLLM reported "
        "with the step."
    ),
    names.BATCH_DRAFTS: "vLLM's num_drafts of engine steps, by running-batch bucket.",
    names.BATCH_DRAFT_TOKENS: "vLLM's num_draft_tokens of engine steps, by running-batch bucket.",
    names.BATCH_ACCEPTED_TOKENS: (
        "vLLM's num_accepted_tokens of engine steps, by running-batch bucket."
    ),
    names.INFO: (
        "The engine probe in this vLLM: its version, vLLM's, which splits are on, "
        "and why one is off."
    ),
    names.ERRORS: "Errors caught inside the probe's hooks (counted, never raised into vLLM).",
    names.SPECULATIVE_CONFIG_INFO: (
        "vLLM's own speculative configuration as the engine probe read it at start "
        "(speculative off: no --speculative-config; a field this vLLM does not have is empty)."
    ),
}


@dataclass(frozen=True, slots=True)
class TemperatureSeries:
    """The children of one (model, temperature bucket), bound once so a sequence costs no lookup."""

    sequences: Counter
    spec_sequences: Counter
    drafts: Counter
    draft_tokens: Counter
    accepted_tokens: Counter
    accepted_per_position: tuple[Counter, ...]
    acceptance_rate: Histogram
    ttft: Histogram
    tpot: Histogram


def adder(child: Counter) -> Callable[[float], None]:
    """The cheapest exact way to add a non-negative amount to a labelled counter child.

    ``Counter.inc`` checks that the child is labelled and the amount non-negative, then calls
    its value's ``inc`` (a lock; under ``PROMETHEUS_MULTIPROC_DIR`` a write to the process's
    file). Bound once, the value's ``inc`` skips two Python calls per update; the probe checks
    the amounts itself. The public ``inc`` when prometheus_client's internals differ.
    """
    value_inc = getattr(getattr(child, "_value", None), "inc", None)
    if type(child) is Counter and callable(value_inc):
        return value_inc  # type: ignore[no-any-return]
    return child.inc


def observer(child: Histogram) -> Callable[[float], None]:
    """``child.observe`` without its per-bound loop: prometheus_client adds the amount to the
    sum and 1 to the first bucket whose bound is >= the amount (``bisect_left`` finds the same
    one). The public ``observe`` for NaN and when prometheus_client's internals differ."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    sum_inc = getattr(getattr(child, "_sum", None), "inc", None)
    if not (
        type(child) is Histogram
        and isinstance(bounds, list)
        and isinstance(buckets, list)
        and bounds
        and len(bounds) == len(buckets)
        and bounds[-1] == math.inf
        and callable(sum_inc)
        and all(callable(getattr(bucket, "inc", None)) for bucket in buckets)
    ):
        return child.observe
    bucket_incs = tuple(bucket.inc for bucket in buckets)
    public = child.observe

    def observe(amount: float) -> None:
        if amount <= math.inf:  # False for NaN
            sum_inc(amount)
            bucket_incs[bisect_left(bounds, amount)](1)
        else:
            public(amount)

    return observe


class SequenceRow:
    """One temperature series' updates, bound once (``adder``, ``observer``): a finished
    sequence costs a dozen direct value updates in vLLM's output loop."""

    __slots__ = (
        "acceptance_rate",
        "accepted_per_position",
        "accepted_tokens",
        "draft_tokens",
        "drafts",
        "sequences",
        "series",
        "spec_sequences",
        "tpot",
        "ttft",
    )

    def __init__(self, series: TemperatureSeries) -> None:
        self.series = series
        self.sequences = adder(series.sequences)
        self.spec_sequences = adder(series.spec_sequences)
        self.drafts = adder(series.drafts)
        self.draft_tokens = adder(series.draft_tokens)
        self.accepted_tokens = adder(series.accepted_tokens)
        self.accepted_per_position = tuple(adder(c) for c in series.accepted_per_position)
        self.acceptance_rate = observer(series.acceptance_rate)
        self.ttft = observer(series.ttft)
        self.tpot = observer(series.tpot)

    def count(
        self, figures: SequenceFigures | None, timing: tuple[float, float] | None = None
    ) -> None:
        """One finished sequence, checked by its caller: its count, its speculative figures
        (None: vLLM gave none) and its (TTFT, TPOT) in seconds (None: no timing)."""
        self.sequences(1)
        if figures is not None:
            self.spec_sequences(1)
            self.drafts(figures.drafts)
            self.draft_tokens(figures.draft_tokens)
            self.accepted_tokens(figures.accepted_tokens)
            per_position = self.accepted_per_position
            for position, accepted in enumerate(figures.accepted_per_position):
                if accepted:
                    per_position[position](accepted)
            rate = figures.acceptance_rate
            if rate is not None:
                self.acceptance_rate(rate)
        if timing is not None:
            self.ttft(timing[0])
            self.tpot(timing[1])


@dataclass(frozen=True, slots=True)
class BatchSeries:
    steps: Counter
    drafts: Counter
    draft_tokens: Counter
    accepted_tokens: Counter


class Families:
    """Every family of the probe, registered once in ``registry``."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        def counter(name: str, labels: Sequence[str]) -> Counter:
            return Counter(name, HELP[name], labelnames=labels, registry=registry)

        def histogram(name: str, bounds: Sequence[float]) -> Histogram:
            return Histogram(
                name, HELP[name], labelnames=TEMPERATURE_LABELS, buckets=bounds, registry=registry
            )

        self.sequences = counter(names.SEQUENCES, TEMPERATURE_LABELS)
        self.spec_sequences = counter(names.SPEC_SEQUENCES, TEMPERATURE_LABELS)
        self.drafts = counter(names.DRAFTS, TEMPERATURE_LABELS)
        self.draft_tokens = counter(names.DRAFT_TOKENS, TEMPERATURE_LABELS)
        self.accepted_tokens = counter(names.ACCEPTED_TOKENS, TEMPERATURE_LABELS)
        self.accepted_per_position = counter(
            names.ACCEPTED_PER_POSITION, (*TEMPERATURE_LABELS, names.POSITION)
        )
        self.acceptance_rate = histogram(names.ACCEPTANCE_RATE, ACCEPTANCE_RATE_BOUNDS)
        self.ttft = histogram(names.TTFT, TTFT_BOUNDS)
        self.tpot = histogram(names.TPOT, TPOT_BOUNDS)
        self.batch_steps = counter(names.BATCH_STEPS, BATCH_LABELS)
        self.batch_drafts = counter(names.BATCH_DRAFTS, BATCH_LABELS)
        self.batch_draft_tokens = counter(names.BATCH_DRAFT_TOKENS, BATCH_LABELS)
        self.batch_accepted_tokens = counter(names.BATCH_ACCEPTED_TOKENS, BATCH_LABELS)
        self.info = Gauge(
            names.INFO,
            HELP[names.INFO],
            labelnames=names.INFO_LABELS,
            registry=registry,
            multiprocess_mode="max",
        )
        self.errors = Counter(
            names.ERRORS, HELP[names.ERRORS], labelnames=(names.HOOK,), registry=registry
        )
        for hook in names.HOOKS:
            self.errors.labels(hook)
        self.speculative_config = _speculative_config_gauge(registry)
        self._temperature: dict[tuple[str, str], TemperatureSeries] = {}
        self._batch: dict[tuple[str, str, str], BatchSeries] = {}
        self._lock = threading.Lock()

    def set_info(self, version: str, vllm_version: str, off: Mapping[str, Sequence[str]]) -> str:
        """Set the info series: a split (``hooks.SPLITS``) is on unless ``off`` lists why it is
        not. Returns the reason, the whole of it (the series keeps ``names.REASON_LIMIT``
        characters)."""
        reason = "; ".join(
            f"{split} split off: {', '.join(why)}" for split, why in off.items() if why
        )
        self.info.labels(
            version,
            vllm_version,
            names.OFF if off.get(hooks.TEMPERATURE_SPLIT) else names.ON,
            names.OFF if off.get(hooks.BATCH_SPLIT) else names.ON,
            reason[: names.REASON_LIMIT],
        ).set(1)
        return reason

    def set_speculative_config(self, config: EngineSpeculativeConfig) -> None:
        """The speculative-config info series: one per process, the same in every API server."""
        self.speculative_config.labels(*config.label_values()).set(1)

    def temperature_series(self, model: str, bucket: str, positions: int) -> TemperatureSeries:
        """The series of (model, bucket), with at least ``positions`` per-position children."""
        series = self._temperature.get((model, bucket))
        if series is None or len(series.accepted_per_position) < positions:
            with self._lock:
                series = self._temperature_series(model, bucket, positions)
        return series

    def _temperature_series(self, model: str, bucket: str, positions: int) -> TemperatureSeries:
        known = self._temperature.get((model, bucket))
        if known is not None and len(known.accepted_per_position) >= positions:
            return known
        labels = (model, bucket)
        series = TemperatureSeries(
            sequences=self.sequences.labels(*labels),
            spec_sequences=self.spec_sequences.labels(*labels),
            drafts=self.drafts.labels(*labels),
            draft_tokens=self.draft_tokens.labels(*labels),
            accepted_tokens=self.accepted_tokens.labels(*labels),
            accepted_per_position=tuple(
                self.accepted_per_position.labels(*labels, str(position))
                for position in range(positions)
            ),
            acceptance_rate=self.acceptance_rate.labels(*labels),
            ttft=self.ttft.labels(*labels),
            tpot=self.tpot.labels(*labels),
        )
        self._temperature[(model, bucket)] = series
        return series

    def batch_series(self, model: str, engine: str, bucket: str) -> BatchSeries:
        series = self._batch.get((model, engine, bucket))
        if series is None:
            with self._lock:
                labels = (model, engine, bucket)
                series = BatchSeries(
                    steps=self.batch_steps.labels(*labels),
                    drafts=self.batch_drafts.labels(*labels),
                    draft_tokens=self.batch_draft_tokens.labels(*labels),
                    accepted_tokens=self.batch_accepted_tokens.labels(*labels),
                )
                self._batch[(model, engine, bucket)] = series
        return series

    def count_error(self, hook: str) -> None:
        """Never raises: the error counter is the last thing that may fail."""
        with contextlib.suppress(Exception):  # nothing left to report it to
            self.errors.labels(hook).inc()


def _speculative_config_gauge(registry: CollectorRegistry) -> Gauge:
    """Like the probe's info series: ``max`` over API servers keeps one series, not one per
    process."""
    return Gauge(
        names.SPECULATIVE_CONFIG_INFO,
        HELP[names.SPECULATIVE_CONFIG_INFO],
        labelnames=names.SPECULATIVE_CONFIG_LABELS,
        registry=registry,
        multiprocess_mode="max",
    )

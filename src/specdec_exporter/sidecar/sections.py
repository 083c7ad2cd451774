"""The live page's explaining sections, each from a small typed input: vLLM's scrape status (as
Prometheus' /targets shows a target), per-position acceptance, latency per temperature bucket and
acceptance per load level."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric

from specdec_exporter.core.histogram import HistogramFigures, figures
from specdec_exporter.core.report import Entry
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.tap.stats import BUCKET_LABELS, TPOT_FAMILY, TTFT_FAMILY
from specdec_exporter.term import Cell

Table = tuple[str, Sequence[str], Sequence[Sequence[Cell]]]
"""(title, headers, rows)."""

NO_LOAD_LEVELS = "no load-level data (needs the engine probe)"
LOAD_LEVELS_WHILE_DOWN = (
    "no load-level figures while vLLM does not answer (the engine probe was there, its "
    "load-level split on, as of the last successful poll)"
)
LOAD_LEVELS_NOT_YET = (
    "no load-level figures yet: the engine probe's load-level split is on, and no engine step "
    "drafted in the window"
)
NO_TEMPERATURE_SPLIT = (
    "no temperature split: neither the engine probe in vLLM (docs/probe.md) nor the request tap "
    "(--proxy-listen)"
)
NO_STEPS = "no steps in the window"
"""A running-batch bucket no drafting step fell in: no figures, not a verdict."""
MAX_ERROR_CHARS = 300
"""The page shows at most this much of a scrape error (the detail, as logged, may quote a line)."""


def utc(at: float) -> str:
    """``2026-11-26 03:20:15 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def ago(at: float, now: float) -> str:
    seconds = max(0.0, now - at)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


@dataclass(frozen=True, slots=True)
class ScrapeStatus:
    """What the page says about the scrapes of vLLM, as Prometheus' /targets says it of a target."""

    up: bool
    ever_up: bool
    attempts: int
    error: str | None
    """``reason: detail`` of the latest poll when it failed."""
    last_success_at: float | None
    last_poll_at: float | None
    duration: float | None
    failed_in_a_row: int
    failures: Mapping[str, int]

    @classmethod
    def of(cls, state: PollState) -> ScrapeStatus:
        error = state.last_error
        return cls(
            up=state.up,
            ever_up=state.ever_up,
            attempts=state.attempts,
            error=None if error is None else f"{error.reason}: {error.detail}"[:MAX_ERROR_CHARS],
            last_success_at=state.last_success_at,
            last_poll_at=state.last_poll_at,
            duration=state.scrape_duration,
            failed_in_a_row=state.failed_in_a_row,
            failures={str(reason): count for reason, count in state.failures.items()},
        )

    def as_json(self, now: float) -> dict[str, object]:
        """What the page's scrape status says, for /api/report (times as Unix seconds)."""
        return {
            "headline": self.headline(),
            "up": self.up,
            "ever_up": self.ever_up,
            "attempts": self.attempts,
            "error": self.error,
            "last_success_at": self.last_success_at,
            "last_poll_at": self.last_poll_at,
            "duration_seconds": self.duration,
            "failed_in_a_row": self.failed_in_a_row,
            "failures": dict(self.failures),
            "facts": dict(self.facts(now)),
        }

    def headline(self) -> str:
        if self.up:
            return "vLLM answers"
        if self.attempts == 0:
            return "vLLM not polled yet"
        if not self.ever_up:
            return "vLLM has not answered since the sidecar started"
        return "vLLM is not answering"

    def facts(self, now: float) -> list[tuple[str, str]]:
        """(name, value) rows, the /targets page's columns: error, last scrape, duration."""
        rows = []
        if self.error is not None:
            rows.append(("error", self.error))
        rows.append(
            (
                "last successful scrape",
                "never since the sidecar started"
                if self.last_success_at is None
                else f"{utc(self.last_success_at)} ({ago(self.last_success_at, now)})",
            )
        )
        if self.duration is not None:
            rows.append(("duration of that scrape", f"{self.duration * 1000:.0f} ms"))
        if self.last_poll_at is not None:
            rows.append(("last poll", f"{utc(self.last_poll_at)} ({ago(self.last_poll_at, now)})"))
        if not self.up and self.attempts:
            rows.append(("failed polls in a row", str(self.failed_in_a_row)))
        failures = ", ".join(f"{reason} {count}" for reason, count in self.failures.items())
        rows.append(("failures since start, by reason", failures))
        return rows


def per_position_table(report: Sequence[Entry]) -> Table | None:
    """Acceptance at each draft position, per model and engine; None when no entry has one."""
    width = max((len(e.per_position_acceptance_rate) for e in report), default=0)
    if width == 0:
        return None
    rows = [
        (
            e.model_name,
            e.engine,
            *e.per_position_acceptance_rate,
            *[None] * (width - len(e.per_position_acceptance_rate)),
        )
        for e in report
    ]
    return (
        "Acceptance per draft position (sidecar window)",
        ("model", "engine", *(f"position {i}" for i in range(width))),
        rows,
    )


@dataclass(frozen=True, slots=True)
class BucketLatency:
    model_name: str
    temperature_bucket: str
    ttft: HistogramFigures | None
    tpot: HistogramFigures | None


def bucket_latencies(families: Iterable[Metric]) -> list[BucketLatency]:
    """TTFT and TPOT per (model, temperature bucket) from the exported histogram families,
    whoever feeds them (the request tap today, the engine probe through the same families)."""
    found: dict[str, dict[tuple[str, str], HistogramFigures]] = {}
    for family in families:
        if family.name in (TTFT_FAMILY, TPOT_FAMILY):
            found[family.name] = _histograms(family)
    ttft, tpot = found.get(TTFT_FAMILY, {}), found.get(TPOT_FAMILY, {})
    keys = dict.fromkeys([*ttft, *tpot])  # the families' own order: model, then bucket
    return [
        BucketLatency(model, bucket, ttft.get((model, bucket)), tpot.get((model, bucket)))
        for model, bucket in keys
    ]


def _histograms(family: Metric) -> dict[tuple[str, str], HistogramFigures]:
    buckets: dict[tuple[str, str], list[tuple[float, float]]] = {}
    sums: dict[tuple[str, str], float] = {}
    model_label, bucket_label = BUCKET_LABELS
    for sample in family.samples:
        key = (sample.labels.get(model_label, ""), sample.labels.get(bucket_label, ""))
        if sample.name == f"{family.name}_bucket":
            buckets.setdefault(key, []).append((float(sample.labels["le"]), sample.value))
        elif sample.name == f"{family.name}_sum":
            sums[key] = sample.value
    return {key: figures(sorted(rows), sums.get(key, 0.0)) for key, rows in buckets.items()}


LATENCY_HEADERS = (
    "model",
    "temperature bucket",
    "streams",
    "TTFT mean ms",
    "TTFT P50 ms",
    "TTFT P90 ms",
    "TPOT mean ms",
    "TPOT P50 ms",
    "TPOT P90 ms",
)


def latency_table(latencies: Sequence[BucketLatency], source: str) -> Table:
    def three(value: HistogramFigures | None) -> tuple[Cell, Cell, Cell]:
        if value is None:
            return None, None, None
        return _ms(value.mean), _ms(value.p50), _ms(value.p90)

    rows = [
        (
            row.model_name,
            row.temperature_bucket,
            int(row.ttft.count) if row.ttft else 0,
            *three(row.ttft),
            *three(row.tpot),
        )
        for row in latencies
    ]
    return (f"Latency by temperature bucket ({source}, since start)", LATENCY_HEADERS, rows)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """One running-batch bucket's figures over the window: an item of /api/report's
    ``batch_buckets`` (the engine probe's load split)."""

    model_name: str
    engine: str
    batch_bucket: str
    steps: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    estimated_speedup: float | None
    verdict: str

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> LoadLevel:
        return cls(
            str(item["model_name"]),
            str(item["engine"]),
            str(item["batch_bucket"]),
            float(item["steps"]),
            _number(item.get("acceptance_rate")),
            _number(item.get("mean_acceptance_length")),
            _number(item.get("estimated_speedup")),
            str(item["verdict"]),
        )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


LOAD_LEVEL_HEADERS = (
    "model",
    "engine",
    "running batch",
    "steps",
    "acceptance rate",
    "mean acceptance length",
    "modelled speedup",
    "verdict",
)


def load_level_table(levels: Sequence[LoadLevel]) -> Table:
    """A bucket no drafting step fell in has no figures and no verdict: NO_STEPS."""
    rows = [
        (
            level.model_name,
            level.engine,
            level.batch_bucket,
            int(level.steps),
            level.acceptance_rate,
            level.mean_acceptance_length,
            level.estimated_speedup,
            level.verdict if level.steps else NO_STEPS,
        )
        for level in levels
    ]
    return ("Acceptance by load level (engine probe, sidecar window)", LOAD_LEVEL_HEADERS, rows)

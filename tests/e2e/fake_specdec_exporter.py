"""A stand-in for the sidecar: serves a canned exposition of the contract metrics over HTTP.

Counters grow at rates the test sets (per temperature bucket: draft tokens/s and acceptance) and
are integrated on each scrape, so a test can turn acceptance down and up while Prometheus watches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Sample = tuple[str, str, str]
"""(family, type, sample line)."""

ACCEPTANCE_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))
K = 4


@dataclass
class BucketTraffic:
    draft_tokens_per_second: float
    acceptance: float
    requests_per_second: float = 2.0


@dataclass
class _Totals:
    draft_tokens: float = 0.0
    accepted: float = 0.0
    drafts: float = 0.0
    requests: float = 0.0
    by_acceptance: dict[float, float] = field(default_factory=dict)


class FakeSpecdecExporter:
    def __init__(self, model: str, buckets: dict[str, BucketTraffic]) -> None:
        self.model = model
        self._traffic = dict(buckets)
        self._totals = {name: _Totals() for name in buckets}
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._speedup = 1.5
        self._cost = ("method", 0.1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def target(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> FakeSpecdecExporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def set_acceptance(self, bucket: str, acceptance: float) -> None:
        with self._lock:
            self._advance()
            self._traffic[bucket].acceptance = acceptance

    def set_speedup(self, speedup: float) -> None:
        with self._lock:
            self._speedup = speedup

    def set_cost(self, source: str, ratio: float) -> None:
        """c and where it came from (`specdec_draft_cost_ratio{source}`)."""
        with self._lock:
            self._cost = (source, ratio)

    def exposition(self) -> str:
        """Text format 0.0.4, one TYPE line per family, samples grouped under it."""
        with self._lock:
            self._advance()
            families: dict[str, tuple[str, list[str]]] = {}
            for family, kind, sample in self._samples():
                families.setdefault(family, (kind, []))[1].append(sample)
        return "".join(
            f"# TYPE {family} {kind}\n" + "".join(f"{s}\n" for s in samples)
            for family, (kind, samples) in families.items()
        )

    def _advance(self) -> None:
        now = time.monotonic()
        elapsed, self._last = now - self._last, now
        for name, traffic in self._traffic.items():
            totals = self._totals[name]
            tokens = traffic.draft_tokens_per_second * elapsed
            totals.draft_tokens += tokens
            totals.accepted += tokens * traffic.acceptance
            totals.drafts += tokens / K
            totals.requests += traffic.requests_per_second * elapsed
            key = traffic.acceptance
            totals.by_acceptance[key] = (
                totals.by_acceptance.get(key, 0.0) + traffic.requests_per_second * elapsed
            )

    def _samples(self) -> Iterator[Sample]:
        model = f'model_name="{self.model}"'
        engine = f'{model},engine="0"'
        totals = list(self._totals.values())
        drafts = sum(t.drafts for t in totals)
        accepted = sum(t.accepted for t in totals)
        yield from _gauge("specdec_up", "", 1)
        yield from _gauge("specdec_vllm_ever_up", "", 1)
        source, ratio = self._cost
        yield from _gauge("specdec_draft_cost_ratio", f'source="{source}"', ratio)
        yield from _gauge("specdec_tap_enabled", "", 1)
        yield from _gauge("specdec_scrape_duration_seconds", "", 0.004)
        for reason in ("connect", "timeout", "http_status", "parse", "too_large", "internal"):
            yield from _counter("specdec_scrape_failures_total", f'reason="{reason}"', 0)
        yield from _gauge("specdec_build_info", 'version="0.1.0"', 1)
        yield from _gauge("specdec_spec_decode_enabled", model, 1)
        yield from _gauge("specdec_speculative_info", f'{model},method="draft_model"', 1)
        yield from _gauge("specdec_num_speculative_tokens", model, K)
        yield from _gauge("specdec_estimated_speedup", model, self._speedup)
        yield from _gauge("specdec_break_even_acceptance_rate", model, 0.1)
        yield from _gauge("specdec_request_coverage_ratio", model, 1.0)
        yield from _counter("specdec_drafts_total", engine, drafts)
        yield from _counter(
            "specdec_draft_tokens_total", engine, sum(t.draft_tokens for t in totals)
        )
        yield from _counter("specdec_accepted_tokens_total", engine, accepted)
        yield from _counter("specdec_generation_tokens_total", engine, accepted + drafts)
        for position in range(K):
            share = accepted * (0.4 - 0.1 * position)
            yield from _counter(
                "specdec_accepted_tokens_per_position_total",
                f'{engine},position="{position}"',
                share,
            )
        for bucket, t in self._totals.items():
            yield from self._bucket_samples(f'{model},temperature_bucket="{bucket}"', t)
        yield from _gauge("specdec_temperature_split_info", 'source="tap"', 1)
        for batch_bucket, share in (("1", 0.25), ("2-4", 0.75)):
            labels = f'{engine},batch_bucket="{batch_bucket}"'
            yield from _counter("specdec_batch_steps_total", labels, share * drafts)
            yield from _counter("specdec_batch_drafts_total", labels, share * drafts)
            yield from _counter(
                "specdec_batch_draft_tokens_total",
                labels,
                share * sum(t.draft_tokens for t in totals),
            )
            yield from _counter("specdec_batch_accepted_tokens_total", labels, share * accepted)

    def _bucket_samples(self, labels: str, t: _Totals) -> Iterator[Sample]:
        yield from _counter("specdec_requests_total", f'{labels},attributed="true"', t.requests)
        yield from _counter("specdec_request_drafts_total", labels, t.drafts)
        yield from _counter("specdec_request_draft_tokens_total", labels, t.draft_tokens)
        yield from _counter("specdec_request_accepted_tokens_total", labels, t.accepted)
        yield from _histogram(
            "specdec_request_acceptance_rate", labels, t.by_acceptance, ACCEPTANCE_BUCKETS
        )
        yield from _histogram(
            "specdec_request_time_to_first_token_seconds",
            labels,
            {0.08: t.requests},
            (0.05, 0.1, 0.25, 1.0),
        )
        yield from _histogram(
            "specdec_request_time_per_output_token_seconds",
            labels,
            {0.02: t.requests},
            (0.01, 0.025, 0.05, 0.1),
        )

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.exposition().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Silent: Prometheus scrapes every second."""

        return Handler


def _gauge(name: str, labels: str, value: float) -> Iterator[Sample]:
    yield name, "gauge", _sample(name, labels, value)


def _counter(name: str, labels: str, value: float) -> Iterator[Sample]:
    """Text format 0.0.4 names a counter's family with its `_total` sample name."""
    yield name, "counter", _sample(name, labels, value)


def _sample(name: str, labels: str, value: float) -> str:
    return f"{name}{{{labels}}} {value}" if labels else f"{name} {value}"


def _histogram(
    name: str, labels: str, observations: dict[float, float], bounds: tuple[float, ...]
) -> Iterator[Sample]:
    """Cumulative buckets from {observed value: how many observations}."""
    for bound in bounds:
        count = sum(n for value, n in observations.items() if value <= bound)
        yield name, "histogram", f'{name}_bucket{{{labels},le="{bound}"}} {count}'
    total = sum(observations.values())
    yield name, "histogram", f'{name}_bucket{{{labels},le="+Inf"}} {total}'
    yield name, "histogram", f"{name}_sum{{{labels}}} {sum(v * n for v, n in observations.items())}"
    yield name, "histogram", f"{name}_count{{{labels}}} {total}"

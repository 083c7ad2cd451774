"""What one request and one run produced: per-request results and the run's result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specdec_exporter.core import vllm_names as names
from specdec_exporter.core.request_metrics import SpecDecodeSummary, count, parse_spec_decoding
from specdec_exporter.devtools.load.mix import temperature_label

ERROR_CONNECT = "connect"
"""The TCP connection could not be opened (refused, unreachable, DNS)."""
ERROR_TIMEOUT = "timeout"
"""Connect, write, read or pool timeout."""
ERROR_DISCONNECT = "disconnect"
"""The server closed the connection or broke the protocol in the middle of a response."""
ERROR_MALFORMED = "malformed"
"""The body is not the JSON (or SSE) an OpenAI-compatible server sends."""
ERROR_STREAM = "stream_error"
"""The server sent an error object inside the stream (after the 200 status)."""
ERROR_INCOMPLETE = "incomplete"
"""The stream ended without ``data: [DONE]``."""


def http_error_kind(status: int) -> str:
    return f"http_{status}"


@dataclass(frozen=True)
class SpecDecoding:
    """``metrics.speculative_decoding`` of one response (vLLM >= 0.29, per-request metrics on)."""

    num_spec_steps: int
    num_draft_tokens: int
    num_accepted_draft_tokens: int
    num_spec_tokens: int | None = None
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    acceptance_histogram: tuple[int, ...] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The object exactly as the server sent it (per-step arrays of ``detailed`` mode included)."""

    @classmethod
    def from_json(cls, value: object) -> SpecDecoding | None:
        """Read the object; None when ``core.request_metrics`` finds it absent or unusable."""
        summary = parse_spec_decoding(value)
        if not isinstance(summary, SpecDecodeSummary) or not isinstance(value, dict):
            return None
        histogram = value.get(names.REQUEST_ACCEPTANCE_HISTOGRAM)
        return cls(
            num_spec_steps=summary.spec_steps,
            num_draft_tokens=summary.draft_tokens,
            num_accepted_draft_tokens=summary.accepted_tokens,
            num_spec_tokens=count(value.get(names.REQUEST_SPEC_TOKENS)),
            mean_acceptance_length=_number(value.get(names.REQUEST_MEAN_ACCEPTANCE_LENGTH)),
            draft_acceptance_rate=_number(value.get(names.REQUEST_ACCEPTANCE_RATE)),
            acceptance_histogram=_counts(histogram) if isinstance(histogram, list) else None,
            raw=value,
        )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _counts(values: list[object]) -> tuple[int, ...] | None:
    counts = tuple(count(value) for value in values)
    return None if None in counts else tuple(c for c in counts if c is not None)


@dataclass(frozen=True)
class RequestResult:
    """One request. Times are seconds; ``started`` is measured from the start of the run."""

    index: int
    temperature: float | None
    """As requested; None means the ``temperature`` key was omitted (server default)."""
    stream: bool
    started: float
    latency: float
    """End to end: from sending the request to the end of the response body."""
    error: str | None = None
    status: int | None = None
    output_tokens: int | None = None
    tokens_from_usage: bool = False
    """False when ``output_tokens`` counts content chunks (a stream without usage)."""
    chunks: int = 0
    content_chunks: int = 0
    ttft: float | None = None
    """Streaming only: until the first chunk with non-empty content or text."""
    spec: SpecDecoding | None = None
    server_tpot: float | None = None
    """vLLM's own TPOT of the request (``metrics.mean_itl_ms``, seconds), when it sends it."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def label(self) -> str:
        return temperature_label(self.temperature)

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (latency - ttft) / (output_tokens - 1).

        vLLM's TPOT; it is also the request's mean inter-token latency. Streaming only.
        """
        if self.ttft is None or self.output_tokens is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


@dataclass(frozen=True)
class LoadResult:
    """A whole run: every request in completion order, and the wall time it took."""

    model: str
    endpoint: str
    elapsed: float
    results: tuple[RequestResult, ...]

    @property
    def succeeded(self) -> int:
        return sum(1 for result in self.results if result.ok)

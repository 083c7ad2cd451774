"""Read OpenAI-compatible responses: a JSON completion, or a stream's chunks one by one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specdec_exporter.core.request_metrics import completion_tokens_of, spec_decoding_of
from specdec_exporter.devtools.load.results import SpecDecoding
from specdec_exporter.devtools.load.sse import DONE

CONTENT_KEYS = ("content", "reasoning_content", "reasoning")
"""Delta fields that carry generated tokens in a chat chunk (``text`` in a completions chunk)."""


class MalformedResponseError(ValueError):
    """The body is not what an OpenAI-compatible server sends."""


class ServerStreamError(ValueError):
    """The server reported an error inside the stream."""


@dataclass(frozen=True)
class Completion:
    output_tokens: int | None
    spec: SpecDecoding | None
    server_tpot: float | None = None


def parse_completion(body: bytes) -> Completion:
    """A non-streaming chat or completions response: usage tokens and spec metrics."""
    document = _load_object(body)
    if not isinstance(document.get("choices"), list):
        raise MalformedResponseError("response has no choices list")
    return Completion(
        completion_tokens_of(document), spec_decoding(document), server_tpot(document)
    )


def spec_decoding(document: dict[str, Any]) -> SpecDecoding | None:
    return SpecDecoding.from_json(spec_decoding_of(document))


def server_tpot(document: dict[str, Any]) -> float | None:
    """vLLM's own TPOT of the request, seconds: ``metrics.mean_itl_ms`` (first to last output
    token over tokens - 1, engine timestamps; needs ``--enable-per-request-metrics``)."""
    metrics = document.get("metrics")
    value = metrics.get("mean_itl_ms") if isinstance(metrics, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) / 1000.0


def _load_object(payload: bytes) -> dict[str, Any]:
    try:
        document = json.loads(payload)
    except ValueError:
        raise MalformedResponseError("body is not valid JSON") from None
    if not isinstance(document, dict):
        raise MalformedResponseError("body is not a JSON object")
    return document


class StreamTally:
    """Accumulates one streamed response from its SSE data payloads and their arrival times.

    ``started`` and every ``now`` come from the same monotonic clock.
    """

    def __init__(self, started: float) -> None:
        self.started = started
        self.chunks = 0
        self.content_chunks = 0
        self.first_content_at: float | None = None
        self.usage_tokens: int | None = None
        self.spec: SpecDecoding | None = None
        self.server_tpot: float | None = None
        self.done = False

    def add(self, payload: bytes, now: float) -> None:
        if payload == DONE:
            self.done = True
            return
        chunk = _load_object(payload)
        if "error" in chunk or chunk.get("object") == "error":
            raise ServerStreamError("error event in stream")
        self.chunks += 1
        choices = chunk.get("choices")
        if choices and _has_content(choices):
            self.content_chunks += 1
            if self.first_content_at is None:
                self.first_content_at = now
        if "usage" in chunk:
            self._take_usage(chunk)
        if "metrics" in chunk:
            self._take_metrics(chunk)

    def _take_usage(self, chunk: dict[str, Any]) -> None:
        tokens = completion_tokens_of(chunk)
        if tokens is not None:
            self.usage_tokens = tokens

    def _take_metrics(self, chunk: dict[str, Any]) -> None:
        spec = spec_decoding(chunk)
        if spec is not None:
            self.spec = spec
        tpot = server_tpot(chunk)
        if tpot is not None:
            self.server_tpot = tpot

    @property
    def ttft(self) -> float | None:
        return None if self.first_content_at is None else self.first_content_at - self.started

    @property
    def output_tokens(self) -> int:
        """Usage's completion tokens when the server sent them, else the content chunks."""
        return self.content_chunks if self.usage_tokens is None else self.usage_tokens


def _has_content(choices: Any) -> bool:
    if not isinstance(choices, list):
        raise MalformedResponseError("chunk choices is not a list")
    for choice in choices:
        if not isinstance(choice, dict):
            raise MalformedResponseError("chunk choice is not an object")
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(key) for key in CONTENT_KEYS):
            return True
    return False

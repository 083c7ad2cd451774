"""Per-request figures read from a vLLM response: ``metrics.speculative_decoding`` and usage."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SPEC_KEY = b'"speculative_decoding":'


@dataclass(frozen=True, slots=True)
class SpecDecodeSummary:
    """One request's speculative decoding totals, as vLLM reports them (summary mode)."""

    spec_steps: int
    draft_tokens: int
    accepted_tokens: int
    spec_tokens: int | None

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def acceptance_length(self) -> float | None:
        return 1 + self.accepted_tokens / self.spec_steps if self.spec_steps else None


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def parse_speculative_decoding(value: object) -> SpecDecodeSummary | None:
    """The summary from a ``speculative_decoding`` object, or None when absent or inconsistent."""
    if not isinstance(value, dict):
        return None
    steps = _count(value.get("num_spec_steps"))
    drafted = _count(value.get("num_draft_tokens"))
    accepted = _count(value.get("num_accepted_draft_tokens"))
    if steps is None or drafted is None or accepted is None or accepted > drafted:
        return None
    spec_tokens = _count(value.get("num_spec_tokens"))
    return SpecDecodeSummary(steps, drafted, accepted, spec_tokens or None)


def summary_from_chunk(chunk: dict[str, Any]) -> SpecDecodeSummary | None:
    """The summary of a parsed response or final usage chunk (``metrics`` may be null)."""
    metrics = chunk.get("metrics")
    if not isinstance(metrics, dict):
        return None
    return parse_speculative_decoding(metrics.get("speculative_decoding"))


def completion_tokens_of(chunk: dict[str, Any]) -> int | None:
    usage = chunk.get("usage")
    return _count(usage.get("completion_tokens")) if isinstance(usage, dict) else None


def _decode_value_at(text: bytes, key: bytes) -> object:
    """The JSON value right after the last ``key`` in ``text``; None when absent or broken."""
    at = text.rfind(key)
    if at < 0:
        return None
    tail = text[at + len(key):].decode("utf-8", errors="replace").lstrip()
    try:
        value, _ = json.JSONDecoder().raw_decode(tail)
    except json.JSONDecodeError:
        return None
    return value


def summary_from_response_tail(tail: bytes) -> SpecDecodeSummary | None:
    """The summary from the end of a non-streaming JSON response, without parsing the whole body.

    Keys cannot occur inside JSON strings unescaped, so the last ``"speculative_decoding":`` is
    the one under the top-level ``metrics``.
    """
    return parse_speculative_decoding(_decode_value_at(tail, SPEC_KEY))

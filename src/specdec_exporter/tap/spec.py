"""Per-request figures from a response the tap relays, without parsing whole bodies.

The parsing itself is ``core.request_metrics``; this module only finds the object to parse.
"""

from __future__ import annotations

import json
from typing import Any

from specdec_exporter.core import vllm_names as names
from specdec_exporter.core.request_metrics import (
    SpecDecodeSummary,
    completion_tokens_of,
    parse_spec_decoding,
    summary_of,
)
from specdec_exporter.tap.jsonscan import raw_decode

SPEC_KEY = f'"{names.RESPONSE_SPEC_DECODING}":'.encode()

__all__ = [
    "SpecDecodeSummary",
    "completion_tokens_of",
    "summary_from_chunk",
    "summary_from_response_tail",
]


def summary_from_chunk(chunk: dict[str, Any]) -> SpecDecodeSummary | None:
    """The summary of a parsed response or final usage chunk; None when it has none."""
    summary = summary_of(chunk)
    return summary if isinstance(summary, SpecDecodeSummary) else None


def _decode_value_at(text: bytes, key: bytes) -> object:
    """The JSON value right after the last ``key`` in ``text``; None when absent or broken."""
    at = text.rfind(key)
    if at < 0:
        return None
    tail = text[at + len(key) :].decode("utf-8", errors="replace").lstrip()
    try:
        value, _ = raw_decode(tail)
    except json.JSONDecodeError:
        return None
    return value


def summary_from_response_tail(tail: bytes) -> SpecDecodeSummary | None:
    """The summary from the end of a non-streaming JSON response, without parsing the whole body.

    Keys cannot occur inside JSON strings unescaped, so the last ``"speculative_decoding":`` is
    the one under the top-level ``metrics``.
    """
    summary = parse_spec_decoding(_decode_value_at(tail, SPEC_KEY))
    return summary if isinstance(summary, SpecDecodeSummary) else None

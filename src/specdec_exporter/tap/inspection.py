"""What one response says of speculative decoding: a stream's final usage chunk (and, when the tap
asked for it, the stream without that chunk), or a plain response's tail; and the times that give
a stream's TTFT and TPOT.

The hot path: ``feed`` once per body piece of an inspected response.
"""

from __future__ import annotations

import time

from specdec_exporter.core.buckets import UNKNOWN_LABEL
from specdec_exporter.tap.http1 import Fields
from specdec_exporter.tap.request import RequestPlan
from specdec_exporter.tap.spec import (
    SpecDecodeSummary,
    completion_tokens_of,
    summary_from_chunk,
    summary_from_response_tail,
)
from specdec_exporter.tap.sse import IncludeUsageUndo, UsageWatcher

Outcome = tuple[SpecDecodeSummary | None, float | None, float | None]
"""What a response showed: its per-request metrics, time to first token, time per output token."""

NO_OUTCOME: Outcome = (None, None, None)


class Inspection:
    """Reads one response's body as it passes: a stream through ``undo`` (the tap added
    ``include_usage``: the usage chunk is taken out) or ``watcher``, else the body's ``tail``."""

    def __init__(self, stream: bool, undo_include_usage: bool, limit: int) -> None:
        self.undo = IncludeUsageUndo(limit) if stream and undo_include_usage else None
        self.watcher = UsageWatcher(limit) if stream and not undo_include_usage else None
        self.tail: bytearray | None = None if stream else bytearray()
        self.limit = limit
        self.final_chunk_at: float | None = None

    def feed(self, data: bytes) -> bytes:
        """Inspect a body piece; return the bytes to pass on (all of them, unless the usage chunk
        the tap asked for is being taken out)."""
        undo = self.undo
        if undo is not None:
            data = undo.feed(data)
            if undo.final_chunk is not None and self.final_chunk_at is None:
                self.final_chunk_at = time.monotonic()
            return data
        watcher = self.watcher
        if watcher is not None:
            watcher.feed(data)
            if watcher.final_chunk is not None and self.final_chunk_at is None:
                self.final_chunk_at = time.monotonic()
            return data
        tail = self.tail
        if tail is not None:
            tail += data
            if len(tail) > 2 * self.limit:
                del tail[: -self.limit]
        return data

    def stop(self) -> None:
        """Fail open: inspect no more, pass every byte on as it comes."""
        if self.undo is not None:
            self.undo.passthrough = True
        self.watcher = None
        self.tail = None

    def rest(self) -> bytes:
        """At the end of the body: what the rewrite still holds back, to pass on."""
        return self.undo.finish() if self.undo is not None else b""

    def outcome(self, request_done_at: float, first_body_at: float | None) -> Outcome:
        """The metrics the response carried; TTFT and TPOT for a stream."""
        stream = self.undo or self.watcher
        chunk = stream.final_chunk if stream is not None else None
        spec: SpecDecodeSummary | None = None
        if chunk is not None:
            spec = summary_from_chunk(chunk)
        elif self.tail is not None:
            spec = summary_from_response_tail(bytes(self.tail))
        ttft = tpot = None
        if stream is not None and first_body_at is not None:
            ttft = first_body_at - request_done_at
            tokens = completion_tokens_of(chunk) if chunk is not None else None
            if tokens is not None and tokens > 1 and self.final_chunk_at is not None:
                tpot = (self.final_chunk_at - first_body_at) / (tokens - 1)
        return spec, ttft, tpot


def inspection_for(
    plan: RequestPlan | None, status: int, fields: Fields, limit: int
) -> Inspection | None:
    """How a response is inspected: only a labelled request's 200, not content-encoded."""
    if plan is None or plan.temperature_bucket == UNKNOWN_LABEL or status != 200:
        return None
    if fields.value(b"content-encoding") not in (None, b"identity"):
        return None
    content_type = fields.value(b"content-type") or b""
    stream = content_type.startswith(b"text/event-stream")
    return Inspection(stream, plan.undo_include_usage, limit)

"""The SSE side on the real captures: usage chunk found, include_usage undone byte for byte."""

from __future__ import annotations

import json

import pytest
from tapfakes import chunk_sequence, fixture_stream, sse_events

from specdec_exporter.tap.sse import EventSplitter, IncludeUsageUndo, UsageWatcher

WITH_USAGE = fixture_stream("chat_T0p8_stream_0.sse")
WITHOUT_USAGE = fixture_stream("chat_T0p8_stream_no_include_usage_0.sse")
GREEDY_WITH_USAGE = fixture_stream("chat_T0p0_stream_0.sse")
LIMIT = 1 << 20


def undo(stream: bytes, piece_size: int | None = None) -> tuple[bytes, IncludeUsageUndo]:
    undoer = IncludeUsageUndo(LIMIT)
    pieces = (
        sse_events(stream)
        if piece_size is None
        else [stream[i : i + piece_size] for i in range(0, len(stream), piece_size)]
    )
    out = b"".join(undoer.feed(piece) for piece in pieces) + undoer.finish()
    return out, undoer


def test_undo_gives_the_structure_vllm_sends_without_include_usage() -> None:
    out, undoer = undo(WITH_USAGE)
    assert chunk_sequence(out) == chunk_sequence(WITHOUT_USAGE)
    assert b'"usage"' not in out and b'"metrics"' not in out
    assert undoer.final_chunk is not None
    assert undoer.final_chunk["metrics"]["speculative_decoding"]["num_draft_tokens"] == 172


def test_undo_changes_only_the_finish_and_usage_chunks() -> None:
    events = sse_events(WITH_USAGE)
    out, _ = undo(WITH_USAGE)
    out_events = sse_events(out)
    assert len(out_events) == len(events) - 1
    assert out_events[:-2] == events[:-3]  # every other byte unchanged
    finish = (
        events[-3].removesuffix(b"}\n\n") + b',"system_fingerprint":"vllm-0.32.0-52476dec"}\n\n'
    )
    assert out_events[-2] == finish
    assert out_events[-1] == b"data: [DONE]\n\n"


def test_finish_chunk_matches_the_real_no_usage_capture_exactly() -> None:
    out, _ = undo(WITH_USAGE)
    produced = json.loads(sse_events(out)[-2].removeprefix(b"data: "))
    captured = json.loads(sse_events(WITHOUT_USAGE)[-2].removeprefix(b"data: "))
    assert list(produced) == list(captured)  # same keys in the same order
    assert produced["system_fingerprint"] == captured["system_fingerprint"]


@pytest.mark.parametrize("piece_size", [1, 7, 100, 4096])
def test_undo_is_independent_of_how_bytes_arrive(piece_size: int) -> None:
    whole, _ = undo(WITH_USAGE)
    pieces, undoer = undo(WITH_USAGE, piece_size)
    assert pieces == whole
    assert undoer.final_chunk is not None


def test_complete_events_pass_at_once_only_the_finish_chunk_waits() -> None:
    undoer = IncludeUsageUndo(LIMIT)
    events = sse_events(WITH_USAGE)
    for event in events[:-3]:
        assert undoer.feed(event) == event
    assert undoer.feed(events[-3]) == b""  # finish chunk held for the fingerprint
    assert undoer.feed(events[-2]).endswith(b'"system_fingerprint":"vllm-0.32.0-52476dec"}\n\n')
    assert undoer.feed(events[-1]) == b"data: [DONE]\n\n"


def test_partial_event_is_held_until_its_blank_line() -> None:
    undoer = IncludeUsageUndo(LIMIT)
    event = sse_events(WITH_USAGE)[1]
    assert undoer.feed(event[:10]) == b""
    assert undoer.feed(event[10:]) == event


def test_stream_that_ends_without_usage_chunk_is_flushed_unchanged() -> None:
    """vLLM died or errored: what was held goes out as it came."""
    truncated = b"".join(sse_events(WITH_USAGE)[:-2])
    out, undoer = undo(truncated)
    assert out == truncated
    assert undoer.final_chunk is None


def test_non_sse_body_passes_through_after_the_limit() -> None:
    undoer = IncludeUsageUndo(limit=16)
    assert undoer.feed(b"x" * 10) == b""
    assert undoer.feed(b"y" * 10) == b"x" * 10 + b"y" * 10
    assert undoer.feed(b"z") == b"z"


def test_watcher_finds_metrics_on_the_final_chunk() -> None:
    watcher = UsageWatcher(LIMIT)
    for index in range(0, len(GREEDY_WITH_USAGE), 50):
        watcher.feed(GREEDY_WITH_USAGE[index : index + 50])
    assert watcher.final_chunk is not None
    spec = watcher.final_chunk["metrics"]["speculative_decoding"]
    assert (spec["num_spec_steps"], spec["num_draft_tokens"]) == (23, 92)


def test_watcher_without_usage_finds_nothing() -> None:
    watcher = UsageWatcher(LIMIT)
    watcher.feed(WITHOUT_USAGE)
    assert watcher.final_chunk is None


def test_splitter_holds_only_the_incomplete_tail() -> None:
    splitter = EventSplitter(LIMIT)
    assert splitter.split(b"data: 1\n\ndata: 2") == b"data: 1\n\n"
    assert splitter.split(b"\n\n") == b"data: 2\n\n"
    assert splitter.rest() == b""


EXTRA_BLANK_LINE = [  # an extra blank line before the usage chunk; SSE reads it as nothing
    [b"data: {}\n\n\n" + sse_events(WITH_USAGE)[-2]],
    [b"data: {}\n\n\n", sse_events(WITH_USAGE)[-2]],
    [b"data: {}\n\n", b"\n" + sse_events(WITH_USAGE)[-2]],
]
"""Found by fuzz/fuzz_sse.py: the watcher saw the usage chunk only when the stream was cut
right after the blank line, because an event was read with the extra newline in front."""


@pytest.mark.parametrize("pieces", EXTRA_BLANK_LINE)
def test_watcher_reads_an_event_after_an_extra_blank_line_however_it_is_cut(
    pieces: list[bytes],
) -> None:
    watcher = UsageWatcher(LIMIT)
    for piece in pieces:
        watcher.feed(piece)
    assert watcher.final_chunk is not None


@pytest.mark.parametrize("pieces", EXTRA_BLANK_LINE)
def test_undo_after_an_extra_blank_line_drops_the_usage_event_and_keeps_the_newline(
    pieces: list[bytes],
) -> None:
    undoer = IncludeUsageUndo(LIMIT)
    out = b"".join(undoer.feed(piece) for piece in pieces) + undoer.finish()
    assert out == b"data: {}\n\n\n"
    assert undoer.final_chunk is not None

"""IncludeUsageUndo keeps every byte of a stream without a usage chunk, however it is cut
(a regression found by fuzz/fuzz_sse.py)."""

from __future__ import annotations

import pytest

from specdec_exporter.tap.sse import IncludeUsageUndo, iter_events

FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'


@pytest.mark.parametrize("cut", [0, 10, len(FINISH), len(FINISH) + 1])
def test_an_extra_blank_line_after_a_held_event_is_kept(cut: int) -> None:
    stream = FINISH + b"\n" + b"data: [DONE]\n\n\n"
    rewriter = IncludeUsageUndo(1024)
    out = rewriter.feed(stream[:cut]) + rewriter.feed(stream[cut:]) + rewriter.finish()
    assert out == stream


def test_iter_events_keeps_every_byte() -> None:
    assert iter_events(b"a\n\nb\n\n\n") == [b"a\n\n", b"b\n\n", b"\n"]

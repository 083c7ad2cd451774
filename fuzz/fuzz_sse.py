"""Coverage-guided fuzzing of the tap's SSE inspection (tap/sse.py): UsageWatcher and
IncludeUsageUndo, fed the input in pieces cut at random.

The input is the stream itself (so real captures seed the corpus); piece sizes and the splitter
limit come from a seed derived from it. Run like fuzz_exposition.py (see fuzz/README.md).
"""

from __future__ import annotations

import random
import sys
import zlib

import atheris

with atheris.instrument_imports(include=["specdec_exporter"]):
    from specdec_exporter.tap.sse import IncludeUsageUndo, UsageWatcher

LIMITS = (64, 1024, 1 << 20)
"""Event limits: tiny ones to reach the overflow paths, 1 MiB as the tap's default."""


def pieces(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12))))
    return [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def undo(parts: list[bytes], limit: int) -> tuple[bytes, IncludeUsageUndo]:
    rewriter = IncludeUsageUndo(limit)
    out = b"".join(rewriter.feed(part) for part in parts) + rewriter.finish()
    return out, rewriter


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    rng = random.Random(zlib.crc32(data))
    limit = LIMITS[rng.randrange(len(LIMITS))]
    parts = pieces(data, rng)

    watcher = UsageWatcher(limit)
    for part in parts:
        watcher.feed(part)
    whole_watcher = UsageWatcher(limit)
    whole_watcher.feed(data)
    if not (watcher.splitter.overflowed or whole_watcher.splitter.overflowed):
        assert watcher.final_chunk == whole_watcher.final_chunk

    out, rewriter = undo(parts, limit)
    if rewriter.final_chunk is None:
        assert out == data, "without a usage chunk every byte must pass unchanged"
    whole_out, whole = undo([data], limit)
    if not (rewriter.passthrough or whole.passthrough):
        assert out == whole_out, "the output must not depend on how the stream was cut"


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()

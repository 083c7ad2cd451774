"""http1's chunk framing: the size lines from the table and past it are the same hex lines."""

from __future__ import annotations

import pytest

from specdec_exporter.tap.http1 import CHUNK_SIZE_LINES, chunk, chunk_size_line


@pytest.mark.parametrize(
    ("size", "line"),
    [
        (0, b"0\r\n"),
        (1, b"1\r\n"),
        (230, b"e6\r\n"),
        (4095, b"fff\r\n"),  # the table's last
        (4096, b"1000\r\n"),  # the first formatted
        (1 << 20, b"100000\r\n"),
    ],
)
def test_chunk_size_line(size: int, line: bytes) -> None:
    assert chunk_size_line(size) == line


def test_the_table_is_every_size_it_covers() -> None:
    assert len(CHUNK_SIZE_LINES) == 4096
    assert all(line == b"%x\r\n" % size for size, line in enumerate(CHUNK_SIZE_LINES))


def test_chunk_frames_data() -> None:
    assert chunk(b"data: {}\n\n") == b"a\r\ndata: {}\n\n\r\n"
    assert chunk(b"x" * 4096) == b"1000\r\n" + b"x" * 4096 + b"\r\n"

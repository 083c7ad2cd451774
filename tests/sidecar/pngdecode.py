"""Decode an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium's screenshots are) with zlib.

Enough to count pixels of a colour in a test; no imaging library needed.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate

SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]

    def pixels(self) -> Iterator[tuple[int, int, int]]:
        step = self.channels
        for row in self.rows:
            yield from zip(row[0::step], row[1::step], row[2::step], strict=True)

    def colours(self) -> Counter[tuple[int, int, int]]:
        """How many pixels have each RGB value."""
        return Counter(self.pixels())


def count(colours: Counter[tuple[int, int, int]], colour: str, tolerance: int = 0) -> int:
    """Pixels within ``tolerance`` per channel of ``#rrggbb``."""
    want = bytes.fromhex(colour.removeprefix("#"))
    return sum(
        number
        for pixel, number in colours.items()
        if all(abs(a - b) <= tolerance for a, b in zip(pixel, want, strict=True))
    )


def decode(data: bytes) -> Image:
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    position, header, compressed = len(SIGNATURE), b"", []
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            compressed.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(
            f"unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}"
        )
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(compressed))
    stride = width * channels
    rows, previous = [], bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(raw[start], line, previous, channels)
        rows.append(bytes(line))
        previous = rows[-1]
    return Image(width, height, channels, rows)


def _unfilter(kind: int, line: bytearray, previous: bytes, bpp: int) -> None:
    if kind == 0:
        return
    if kind == 1:  # Sub: running sum per channel
        for channel in range(bpp):
            line[channel::bpp] = bytes(map((255).__and__, accumulate(line[channel::bpp])))
    elif kind == 2:  # Up
        line[:] = _add_bytes(line, previous)
    elif kind == 3:  # Average
        for i in range(len(line)):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + (left + previous[i]) // 2) & 255
    elif kind == 4:  # Paeth
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b = previous[i]
            c = previous[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            predictor = a if pa <= pb and pa <= pc else b if pb <= pc else c
            line[i] = (line[i] + predictor) & 255
    else:
        raise ValueError(f"bad PNG filter type {kind}")


def _add_bytes(left: bytes | bytearray, right: bytes) -> bytes:
    """Bytewise addition mod 256 of two equal-length strings, on big integers (no carries)."""
    size = len(left)
    low = int.from_bytes(b"\x7f" * size, "big")
    x, y = int.from_bytes(left, "big"), int.from_bytes(right, "big")
    return (((x & low) + (y & low)) ^ ((x ^ y) & ~low)).to_bytes(size, "big")

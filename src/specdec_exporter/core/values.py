"""Total conversions of what a poll carries: a float that may not be finite, label text that may
not be a count. Written once so that every figure and every label follows the same rule."""

from __future__ import annotations

import math

MAX_COUNT_DIGITS = 9
"""A label naming a count (an engine index, a batch size) has at most this many digits: more is
no count vLLM runs, and ``int()`` of thousands of digits raises."""


def finite_or_none(value: float | None) -> float | None:
    """``value`` when it is a finite number; None (no meaning, not exported) for NaN and ±Inf."""
    return value if value is not None and math.isfinite(value) else None


def ascii_count(text: str) -> int | None:
    """The non-negative integer that ``text`` writes in ASCII digits ("0".."9", at most
    MAX_COUNT_DIGITS of them), else None: "²" and "٣" are digits to ``str.isdigit`` but not
    counts, and neither is "", "+1", " 1" or "1_000"."""
    if not 0 < len(text) <= MAX_COUNT_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)

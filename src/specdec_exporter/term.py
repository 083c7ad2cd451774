"""Plain-text terminal output: aligned tables and a one-line progress bar (no dependencies)."""

from __future__ import annotations

import math
from collections.abc import Sequence

Cell = str | int | float | None


def format_cell(value: Cell, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], digits: int = 3) -> str:
    """Render rows under headers with columns aligned; numbers right-aligned, text left."""
    cells = [[format_cell(value, digits) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        for index, text in enumerate(row):
            widths[index] = max(widths[index], len(text))
    numeric = [
        all(isinstance(row[index], int | float) or row[index] is None for row in rows) and rows
        for index in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            text.rjust(widths[index]) if numeric[index] else text.ljust(widths[index])
            for index, text in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(list(headers)), rule, *(line(row) for row in cells)])


def progress_bar(done: int, total: int, width: int = 30, suffix: str = "") -> str:
    """A one-line bar such as ``[#######.......]  23/100  suffix`` (no newline)."""
    fraction = 0.0 if total <= 0 else min(1.0, done / total)
    filled = round(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    return f"[{bar}] {done:>{len(str(total))}}/{total}  {suffix}".rstrip()

"""Small PromQL builders shared by rules and dashboards, so every ratio is guarded the same way."""

from __future__ import annotations


def selector(metric: str, *matchers: str) -> str:
    """`metric{m1, m2}` from the non-empty matchers, or the bare name."""
    inner = ", ".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def rate(metric: str, window: str, *matchers: str, offset: str = "") -> str:
    shift = f" offset {offset}" if offset else ""
    return f"rate({selector(metric, *matchers)}[{window}]{shift})"


def guarded_ratio(numerator: str, denominator: str, modifier: str = "") -> str:
    """`num / (den > 0)`: no series at all (not NaN, not +Inf) when nothing was counted."""
    operator = f"/ {modifier} " if modifier else "/ "
    return f"{numerator}\n{operator}({denominator} > 0)"


def sum_without(labels: str, expr: str) -> str:
    return f"sum without ({labels}) ({expr})"


def sum_by(labels: str, expr: str) -> str:
    return f"sum by ({labels}) ({expr})"

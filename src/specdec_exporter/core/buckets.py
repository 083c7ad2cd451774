"""Temperature -> bucket label: a request's effective temperature, resolved as vLLM does, binned."""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Sequence
from decimal import Decimal
from itertools import pairwise

GREEDY_BELOW = 1e-5
"""vLLM's ``_SAMPLING_EPS``: a temperature below this samples greedily."""

VLLM_FALLBACK_TEMPERATURE = 1.0
"""What vLLM samples at when neither the request nor the model's generation config says."""

DEFAULT_EDGES: tuple[float, ...] = (0.5, 0.7, 1.0)
DEFAULT_BATCH_EDGES: tuple[int, ...] = (1, 4, 8, 16, 32, 64)
"""Upper bounds of the running-batch buckets: 1, 2-4, 5-8, 9-16, 17-32, 33-64, 65+ (ranges that
fit vLLM's ``num_speculative_tokens_per_batch_size`` schedules)."""
TEMPERATURE_BUCKETS_ENV = "SPECDEC_TEMPERATURE_BUCKETS"
BATCH_BUCKETS_ENV = "SPECDEC_BATCH_BUCKETS"
"""The environment variables that carry the edges, read by the sidecar's settings and, inside
vLLM, by the engine probe: one value for both, set once by the deploy."""
GREEDY_LABEL = "0"
INVALID_LABEL = "invalid"
"""Temperature present but not a usable number (wrong type, NaN, inf, negative), or no JSON body."""
UNKNOWN_LABEL = "unknown"
"""Body not inspected (larger than the inspection cap), so the temperature was never read."""


MAX_EDGES = 16
"""At most this many edges per variable (17 or 18 buckets): bounds the probe's series on vLLM's
/metrics (docs/probe.md, "Cardinality": the worst case stays far below the sidecar's body cap)."""

EDGE_DIGITS = 20
"""An edge written as a decimal has at most this many characters (bounded label values)."""

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
"""An edge as written: ASCII digits, a point, an exponent (no ``inf``, ``nan``, ``1_0``, ``٣``)."""


def parse_edges(text: str, default: Sequence[float] = DEFAULT_EDGES) -> tuple[float, ...]:
    """``"0.5, 0.7,1"`` -> ``(0.5, 0.7, 1.0)``; empty (or blank): ``default``.

    The one parser of ``SPECDEC_TEMPERATURE_BUCKETS`` and ``SPECDEC_BATCH_BUCKETS``, for the
    sidecar and the probe alike. Raises ValueError (one line, naming the part) for a part that is
    not a finite decimal number, or more than ``MAX_EDGES`` edges; nothing else escapes."""
    if not text.strip():
        return tuple(float(edge) for edge in default)
    parts = [piece.strip() for piece in text.split(",")]
    parts = [part for part in parts if part]
    if len(parts) > MAX_EDGES:
        raise ValueError(f"bucket edges: {len(parts)} edges, at most {MAX_EDGES}")
    edges = []
    for part in parts:
        edge = float(part) if _NUMBER.fullmatch(part) else math.nan
        if not math.isfinite(edge):
            shown = part if len(part) <= 20 else f"{part[:20]}..."
            raise ValueError(
                f"bucket edges: {shown!r} is not a finite number (expected e.g. 0.5,0.7,1.0)"
            )
        edges.append(edge)
    return tuple(edges)


def _check_count(edges: Sequence[float], what: str) -> None:
    if not edges:
        raise ValueError(f"{what} bucket edges: at least one edge is needed")
    if len(edges) > MAX_EDGES:
        raise ValueError(f"{what} bucket edges: {len(edges)} edges, at most {MAX_EDGES}")


def format_edge(edge: float) -> str:
    """Shortest decimal that round-trips, never in exponent form, always with a fraction digit."""
    text = format(Decimal(repr(float(edge))), "f")
    return text if "." in text else f"{text}.0"


def bucket_labels(edges: Sequence[float]) -> tuple[str, ...]:
    """``(0.5, 0.7, 1.0)`` -> ``("0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+")``."""
    names = [format_edge(edge) for edge in edges]
    lowers = ["0", *names[:-1]]
    ranges = [f"{low}-{high}" for low, high in zip(lowers, names, strict=True)]
    return (GREEDY_LABEL, *ranges, f"{names[-1]}+")


def label_order(label: str) -> tuple[int, float, str]:
    """Sort key of a temperature bucket label: greedy first, then the ranges by their lower edge,
    then ``invalid``, ``unknown`` and anything else by name."""
    if label == GREEDY_LABEL:
        return (0, 0.0, label)
    lower = label.split("-", 1)[0].removesuffix("+")
    try:
        return (1, float(lower), label)
    except ValueError:
        return (2, 0.0, label)


class TemperatureBuckets:
    """Bins a temperature: greedy below 1e-5, then ranges (lower edge exclusive, upper included)."""

    def __init__(self, edges: Sequence[float] = DEFAULT_EDGES) -> None:
        _check_count(edges, "temperature")
        checked = tuple(float(edge) for edge in edges)
        if any(not math.isfinite(edge) or edge <= 0 for edge in checked):
            raise ValueError(f"temperature bucket edges must be finite and positive: {checked}")
        if any(low >= high for low, high in pairwise(checked)):
            raise ValueError(f"temperature bucket edges must be strictly increasing: {checked}")
        if any(len(format_edge(edge)) > EDGE_DIGITS for edge in checked):
            raise ValueError(
                f"temperature bucket edges need at most {EDGE_DIGITS} characters as decimals "
                f"(a bucket label): {checked}"
            )
        self.edges = checked
        self.labels: tuple[str, ...] = bucket_labels(checked)

    def label_for(self, temperature: float) -> str:
        """The bucket of a valid (finite, non-negative) temperature."""
        if temperature < GREEDY_BELOW:
            return GREEDY_LABEL
        return self.labels[1 + bisect_left(self.edges, temperature)]

    def __repr__(self) -> str:
        return f"TemperatureBuckets({self.edges!r})"


class BatchBuckets:
    """Bins a step's running-batch size: ``(1, 4, 8)`` -> ``1``, ``2-4``, ``5-8``, ``9+``.

    Each edge is an inclusive upper bound; a size below 1 (never seen in a drafting step) falls in
    the first bucket.
    """

    def __init__(self, edges: Sequence[float] = DEFAULT_BATCH_EDGES) -> None:
        _check_count(edges, "batch")
        if any(not math.isfinite(float(edge)) for edge in edges):
            raise ValueError(f"batch bucket edges must be finite: {tuple(edges)}")
        checked = tuple(int(edge) for edge in edges)
        if any(edge != float(given) for edge, given in zip(checked, edges, strict=True)):
            raise ValueError(f"batch bucket edges must be whole numbers: {tuple(edges)}")
        if checked[0] < 1 or any(low >= high for low, high in pairwise(checked)):
            raise ValueError(f"batch bucket edges must be >= 1 and strictly increasing: {checked}")
        if checked[-1] >= 10**EDGE_DIGITS:
            raise ValueError(f"batch bucket edges must be below 1e{EDGE_DIGITS}: {checked}")
        self.edges = checked
        lowers = [1, *(edge + 1 for edge in checked[:-1])]
        ranges = [
            str(high) if low == high else f"{low}-{high}"
            for low, high in zip(lowers, checked, strict=True)
        ]
        self.labels: tuple[str, ...] = (*ranges, f"{checked[-1] + 1}+")

    def label_for(self, running: int) -> str:
        return self.labels[bisect_left(self.edges, running)]

    def __repr__(self) -> str:
        return f"BatchBuckets({self.edges!r})"


def is_valid_temperature(value: object) -> bool:
    """A JSON number (not a bool) that is finite and non-negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0


def effective_temperature(body_value: object, default: float | None) -> float | None:
    """The temperature vLLM samples at, or None when the body's value is unusable.

    ``body_value`` is the request's ``temperature`` (None when absent or null). Absent: the
    configured default (``--default-temperature`` or the model's generation config), else 1.0.
    A value of the wrong type, NaN, infinite or negative gives None: vLLM rejects or mangles such
    requests, so they are counted in the ``invalid`` bucket rather than guessed.
    """
    if body_value is None:
        if default is not None and is_valid_temperature(default):
            return float(default)
        return VLLM_FALLBACK_TEMPERATURE
    if isinstance(body_value, int | float) and is_valid_temperature(body_value):
        return float(body_value)
    return None

"""Temperature buckets and the effective temperature, with literal numbers."""

from __future__ import annotations

import math

import pytest

from specdec_exporter.core.buckets import (
    TemperatureBuckets,
    bucket_labels,
    effective_temperature,
    format_edge,
    label_order,
)

DEFAULT = TemperatureBuckets()


def test_default_labels() -> None:
    assert DEFAULT.labels == ("0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+")


@pytest.mark.parametrize(
    ("temperature", "label"),
    [
        (0.0, "0"),
        (1e-6, "0"),
        (9.999e-6, "0"),
        (1e-5, "0-0.5"),  # vLLM: greedy only below 1e-5
        (0.3, "0-0.5"),
        (0.5, "0-0.5"),  # upper edge inclusive
        (0.5000001, "0.5-0.7"),  # lower edge exclusive
        (0.7, "0.5-0.7"),
        (0.7000001, "0.7-1.0"),
        (1.0, "0.7-1.0"),
        (1.01, "1.0+"),
        (2.0, "1.0+"),
        (1e308, "1.0+"),
    ],
)
def test_label_for_every_edge(temperature: float, label: str) -> None:
    assert DEFAULT.label_for(temperature) == label


def test_custom_edges() -> None:
    buckets = TemperatureBuckets((0.3, 1.2))
    assert buckets.labels == ("0", "0-0.3", "0.3-1.2", "1.2+")
    assert [buckets.label_for(t) for t in (0, 0.3, 0.31, 1.2, 1.21)] == [
        "0",
        "0-0.3",
        "0.3-1.2",
        "0.3-1.2",
        "1.2+",
    ]


def test_single_edge_and_integer_edges() -> None:
    assert TemperatureBuckets((1,)).labels == ("0", "0-1.0", "1.0+")
    assert TemperatureBuckets((0.25, 2)).labels == ("0", "0-0.25", "0.25-2.0", "2.0+")


@pytest.mark.parametrize(
    ("edge", "text"),
    [
        (0.5, "0.5"),
        (1.0, "1.0"),
        (2, "2.0"),
        (1e-7, "0.0000001"),
        (1e20, "100000000000000000000.0"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_edge_formatting_rule(edge: float, text: str) -> None:
    assert format_edge(edge) == text


def test_labels_from_edges_function() -> None:
    assert bucket_labels((0.4,)) == ("0", "0-0.4", "0.4+")


@pytest.mark.parametrize(
    "edges", [(), (0.0, 1.0), (-1.0,), (0.7, 0.5), (0.5, 0.5), (math.inf,), (math.nan,)]
)
def test_bad_edges_rejected(edges: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="edges"):
        TemperatureBuckets(edges)


@pytest.mark.parametrize(
    ("body_value", "default", "expected"),
    [
        (0.8, None, 0.8),
        (0, None, 0.0),
        (2, 0.6, 2.0),  # an integer is a number
        (0.8, 0.6, 0.8),  # the body wins over the default
        (None, 0.6, 0.6),  # absent or null: the configured default
        (None, None, 1.0),  # else vLLM's 1.0
        (None, 0.0, 0.0),
        (1e308, None, 1e308),
    ],
)
def test_effective_temperature(body_value: object, default: float | None, expected: float) -> None:
    assert effective_temperature(body_value, default) == expected


@pytest.mark.parametrize(
    "body_value", ["0.5", True, False, [0.5], {"t": 1}, math.nan, math.inf, -math.inf, -0.1, -1]
)
def test_invalid_temperature_is_none_and_never_raises(body_value: object) -> None:
    assert effective_temperature(body_value, 0.6) is None


def test_invalid_default_falls_back_to_one() -> None:
    assert effective_temperature(None, math.nan) == 1.0


def test_label_order_sorts_greedy_ranges_by_lower_edge_then_the_rest() -> None:
    labels = ["unknown", "1.0+", "0.7-1.0", "invalid", "0-0.5", "0", "0.5-0.7"]
    assert sorted(labels, key=label_order) == [
        "0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+", "invalid", "unknown"
    ]  # fmt: skip

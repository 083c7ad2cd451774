"""Running-batch buckets and the edge parser shared by the sidecar and the engine probe."""

from __future__ import annotations

import pytest

from specdec_exporter.core.buckets import DEFAULT_BATCH_EDGES, BatchBuckets, parse_edges


def test_default_labels_fit_vllm_batch_size_ranges() -> None:
    assert DEFAULT_BATCH_EDGES == (1, 4, 8, 16, 32, 64)
    assert BatchBuckets().labels == ("1", "2-4", "5-8", "9-16", "17-32", "33-64", "65+")


@pytest.mark.parametrize(
    ("running", "label"),
    [(0, "1"), (1, "1"), (2, "2-4"), (4, "2-4"), (5, "5-8"), (64, "33-64"), (65, "65+")],
)
def test_label_for_takes_each_edge_as_an_inclusive_upper_bound(running: int, label: str) -> None:
    assert BatchBuckets().label_for(running) == label


def test_single_edge_and_adjacent_edges() -> None:
    assert BatchBuckets((1,)).labels == ("1", "2+")
    assert BatchBuckets((2, 3)).labels == ("1-2", "3", "4+")


@pytest.mark.parametrize("edges", [(), (0, 4), (4, 4), (8, 4), (1.5, 4)])
def test_bad_batch_edges_are_refused(edges: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="batch bucket edges"):
        BatchBuckets(edges)


def test_parse_edges_skips_blanks_and_names_a_bad_part() -> None:
    assert parse_edges(" 0.5, 0.7,,1 ") == (0.5, 0.7, 1.0)
    assert parse_edges("1,4,8") == (1.0, 4.0, 8.0)
    with pytest.raises(ValueError, match="'x' is not a finite number"):
        parse_edges("0.5,x")
    assert parse_edges("") == parse_edges("  ") == (0.5, 0.7, 1.0)  # empty: the default
    assert parse_edges("", (1, 4)) == (1.0, 4.0)
    for bad in (
        "inf",
        "nan",
        "1e309",
        "1_0",
        "٣",
        "0x1",
        "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17",
    ):
        with pytest.raises(ValueError, match="bucket edges"):
            parse_edges(bad)

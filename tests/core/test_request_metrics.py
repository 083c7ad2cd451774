"""The one parser of per-request metrics: literal objects in, a summary or a reason out."""

from __future__ import annotations

import pytest

from specdec_exporter.core.request_metrics import (
    SpecDecodeSummary,
    completion_tokens_of,
    parse_spec_decoding,
    summary_of,
)


@pytest.mark.parametrize(
    ("value_", "expected"),
    [
        (
            {
                "num_spec_steps": 8,
                "num_draft_tokens": 32,
                "num_accepted_draft_tokens": 12,
                "num_spec_tokens": 4,
            },
            SpecDecodeSummary(8, 32, 12, 4),
        ),
        (
            {"num_spec_steps": 8, "num_draft_tokens": 32, "num_accepted_draft_tokens": 12},
            SpecDecodeSummary(8, 32, 12, None),
        ),
        (
            {"num_spec_steps": 8, "num_draft_tokens": 32, "num_accepted_draft_tokens": 33},
            "accepted_over_drafted",
        ),
        (
            {"num_spec_steps": -1, "num_draft_tokens": 0, "num_accepted_draft_tokens": 0},
            "missing_count",
        ),
        (
            {"num_spec_steps": True, "num_draft_tokens": 0, "num_accepted_draft_tokens": 0},
            "missing_count",
        ),
        (
            {"num_spec_steps": 1.5, "num_draft_tokens": 0, "num_accepted_draft_tokens": 0},
            "missing_count",
        ),
        ({"num_draft_tokens": 0, "num_accepted_draft_tokens": 0}, "missing_count"),
        (None, "absent"),
        ([], "not_an_object"),
        ("x", "not_an_object"),
    ],
)
def test_parse_spec_decoding(value_: object, expected: object) -> None:
    assert parse_spec_decoding(value_) == expected


def test_ratios_are_vllms() -> None:
    summary = SpecDecodeSummary(spec_steps=8, draft_tokens=32, accepted_tokens=12)
    assert summary.acceptance_rate == 0.375
    assert summary.acceptance_length == 2.5
    assert SpecDecodeSummary(0, 0, 0).acceptance_rate is None
    assert SpecDecodeSummary(0, 0, 0).acceptance_length is None


def test_summary_and_usage_of_a_response() -> None:
    response = {
        "usage": {"completion_tokens": 17},
        "metrics": {
            "speculative_decoding": {
                "num_spec_steps": 5,
                "num_draft_tokens": 20,
                "num_accepted_draft_tokens": 11,
            }
        },
    }
    assert summary_of(response) == SpecDecodeSummary(5, 20, 11)
    assert completion_tokens_of(response) == 17
    assert summary_of({"metrics": None}) == "absent"
    assert summary_of([1]) == "absent"
    assert completion_tokens_of({"usage": {"completion_tokens": -3}}) is None
    assert completion_tokens_of("x") is None

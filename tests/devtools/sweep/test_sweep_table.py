"""The table, CSV and JSON shapes of a sweep, from literal rows."""

from __future__ import annotations

import csv
import io
import json

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.devtools.load.results import RequestResult, SpecDecoding
from specdec_exporter.devtools.sweep.config import SweepConfig
from specdec_exporter.devtools.sweep.phase import (
    counter_acceptance,
    per_request_acceptance,
    phase_row,
)
from specdec_exporter.devtools.sweep.runner import SweepResult
from specdec_exporter.devtools.sweep.table import CSV_COLUMNS, render_sweep, sweep_csv, sweep_json

CONFIG = SweepConfig(
    url="http://vllm:8000",
    metrics_url="http://vllm:8000/metrics",
    temperatures=(0.0, 1.0),
    requests=3,
    seed=5,
    api_key="sk-secret",
)


def ok(spec: SpecDecoding | None, tokens: int, ttft: float | None, latency: float) -> RequestResult:
    return RequestResult(
        index=0,
        temperature=0.0,
        stream=ttft is not None,
        started=0.0,
        latency=latency,
        output_tokens=tokens,
        tokens_from_usage=True,
        ttft=ttft,
        spec=spec,
    )


def spec(steps: int, drafted: int, accepted: int) -> SpecDecoding:
    return SpecDecoding(
        num_spec_steps=steps, num_draft_tokens=drafted, num_accepted_draft_tokens=accepted
    )


GREEDY = [
    ok(spec(5, 20, 18), 23, 0.1, 0.5),
    ok(spec(10, 40, 20), 30, 0.2, 0.7),
    ok(None, 10, 0.1, 0.3),
]
HOT = [
    ok(None, 40, None, 0.9),
    RequestResult(
        index=1,
        temperature=1.0,
        stream=False,
        started=0.0,
        latency=0.1,
        error="http_500",
        status=500,
    ),
]
RESULT = SweepResult(
    "m",
    "per-request",
    (
        phase_row("0.0", GREEDY, 2.0, per_request_acceptance(GREEDY)),
        phase_row(
            "1.0",
            HOT,
            4.0,
            counter_acceptance(Totals(10.0, 40.0, 12.0, (), 40.0), True),
            counters_settled=False,
        ),
    ),
)


def test_csv_has_one_line_per_phase_and_empty_cells_for_no_data() -> None:
    text = sweep_csv(RESULT)
    lines = text.splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 2
    greedy, hot = rows
    assert (greedy["temperature"], greedy["source"], greedy["verdict"]) == (
        "0.0",
        "per-request",
        "borderline",
    )
    assert float(greedy["acceptance_rate"]) == 38 / 60
    assert float(greedy["acceptance_rate_p50"]) == 0.7  # rates 0.9 and 0.5
    assert (greedy["drafts"], greedy["draft_tokens"], greedy["accepted_tokens"]) == (
        "15",
        "60",
        "38",
    )
    assert (greedy["requests_with_metrics"], greedy["counters_settled"]) == ("2", "")
    assert float(greedy["ttft_p50_ms"]) == 100.0
    assert (hot["source"], hot["acceptance_rate"], hot["acceptance_rate_p10"]) == (
        "counters",
        "0.3",
        "",
    )
    assert (hot["drafts"], hot["errors"], hot["succeeded"], hot["verdict"]) == (
        "10",
        "1",
        "1",
        "below threshold",
    )  # no c for the sweep: no speedup
    assert hot["counters_settled"] == "false"


def test_json_keeps_nulls_and_the_run_settings() -> None:
    document = json.loads(json.dumps(sweep_json(RESULT, CONFIG)))
    assert {
        key: document[key]
        for key in ("model", "url", "metrics_url", "source", "source_requested", "seed", "stream")
    } == {
        "model": "m",
        "url": "http://vllm:8000",
        "metrics_url": "http://vllm:8000",
        "source": "per-request",
        "source_requested": "auto",
        "seed": 5,
        "stream": False,
    }
    greedy, hot = document["phases"]
    assert set(greedy) == {
        "temperature",
        "source",
        "requests",
        "succeeded",
        "errors",
        "errors_by_kind",
        "elapsed_s",
        "acceptance_rate",
        "per_request_acceptance_rate",
        "mean_acceptance_length",
        "counts",
        "requests_with_metrics",
        "requests_not_drafting",
        "ttft_ms",
        "tpot_ms",
        "output_tokens",
        "tokens_per_s",
        "verdict",
        "counters_settled",
    }
    assert greedy["counts"] == {"drafts": 15, "draft_tokens": 60, "accepted_tokens": 38}
    assert greedy["mean_acceptance_length"] == 1 + 38 / 15
    assert hot["per_request_acceptance_rate"] == {"p10": None, "p50": None, "p90": None}
    assert hot["errors_by_kind"] == {"http_500": 1}
    assert (hot["verdict"], hot["counters_settled"]) == ("below threshold", False)
    assert "sk-secret" not in json.dumps(document)


def test_table_shows_dashes_and_explains_what_is_missing() -> None:
    text = render_sweep(RESULT, CONFIG)
    lines = text.splitlines()
    assert lines[0] == (
        "model m at http://vllm:8000: 2 temperatures x 3 requests, "
        "concurrency 4, max_tokens 64, non-streaming, seed 5"
    )
    assert lines[1] == (
        "acceptance source: per-request (metrics.speculative_decoding of each response)"
    )
    header = lines[3].split()
    assert header[:4] == ["temperature", "source", "requests", "errors"]
    assert lines[5].split() == [
        "0.0",
        "per-request",
        "3",
        "0",
        "0.63",
        "0.54",
        "0.70",
        "0.86",
        "3.53",
        "100.00",
        "198.00",
        "18.18",
        "22.14",
        "31.50",
        "borderline",
    ]
    assert lines[6].split() == [
        "1.0",
        "counters",
        "2",
        "1",
        "0.30",
        "-",
        "-",
        "-",
        "2.20",
        "-",
        "-",
        "-",
        "-",
        "10.00",
        "below",
        "threshold",
    ]
    assert lines[8:] == [
        "TTFT and TPOT are measured on streamed requests only (add --stream).",
        "T=0.0: 1 of 3 successful requests carried no per-request metrics (not counted).",
        "T=1.0: errors by kind: http_500 1",
        "T=1.0: counters still moving after 10 s; the last requests may be missing from the "
        "figures.",
    ]
    assert "sk-secret" not in text


def test_counters_source_line_names_the_metrics_page() -> None:
    result = SweepResult("m", "counters", RESULT.rows)
    assert render_sweep(result, CONFIG).splitlines()[1] == (
        "acceptance source: counters (deltas of http://vllm:8000/metrics around each phase)"
    )
    undecided = SweepResult("m", None, ())
    assert "none (no phase had a successful request)" in render_sweep(undecided, CONFIG)

"""Turn a sweep's rows into the terminal table, the ``--json`` object or the ``--csv`` text."""

from __future__ import annotations

import csv
import io
from typing import Any

from specdec_exporter.devtools.load.summary import milliseconds
from specdec_exporter.devtools.sweep.config import SweepConfig
from specdec_exporter.devtools.sweep.phase import PhaseRow
from specdec_exporter.devtools.sweep.runner import SweepResult
from specdec_exporter.term import Cell, render_table

TABLE_HEADERS = (
    "temperature",
    "source",
    "requests",
    "errors",
    "accept rate",
    "P10",
    "P50",
    "P90",
    "accept len",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "TPOT p50 ms",
    "TPOT p99 ms",
    "tokens/s",
    "verdict",
)
CSV_COLUMNS = (
    "temperature",
    "source",
    "requests",
    "succeeded",
    "errors",
    "acceptance_rate",
    "acceptance_rate_p10",
    "acceptance_rate_p50",
    "acceptance_rate_p90",
    "mean_acceptance_length",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "requests_with_metrics",
    "requests_not_drafting",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "output_tokens",
    "tokens_per_s",
    "elapsed_s",
    "verdict",
    "counters_settled",
)
SOURCE_TEXT = {
    "per-request": "per-request (metrics.speculative_decoding of each response)",
    "counters": "counters (deltas of {metrics}/metrics around each phase)",
}


def count(value: float) -> int | float:
    """Counter values are whole numbers; shown as such (``200``, not ``200.0``)."""
    return int(value) if float(value).is_integer() else value


def flat_row(row: PhaseRow) -> dict[str, Any]:
    """Every figure of a row under its CSV column name; None for "no data"."""
    spec = row.acceptance
    p10, p50, p90 = spec.rate_percentiles if spec else (None, None, None)
    verdict = spec.verdict if spec else None
    return {
        "temperature": row.label,
        "source": spec.source if spec else None,
        "requests": row.load.requests,
        "succeeded": row.succeeded,
        "errors": row.load.errors,
        "acceptance_rate": spec.acceptance_rate if spec else None,
        "acceptance_rate_p10": p10,
        "acceptance_rate_p50": p50,
        "acceptance_rate_p90": p90,
        "mean_acceptance_length": spec.mean_acceptance_length if spec else None,
        "drafts": count(spec.drafts) if spec else None,
        "draft_tokens": count(spec.draft_tokens) if spec else None,
        "accepted_tokens": count(spec.accepted_tokens) if spec else None,
        "requests_with_metrics": spec.requests_with_metrics if spec else None,
        "requests_not_drafting": spec.requests_not_drafting if spec else None,
        "ttft_p50_ms": milliseconds(row.load.ttft_p50),
        "ttft_p99_ms": milliseconds(row.load.ttft_p99),
        "tpot_p50_ms": milliseconds(row.load.tpot_p50),
        "tpot_p99_ms": milliseconds(row.load.tpot_p99),
        "output_tokens": row.load.output_tokens,
        "tokens_per_s": row.load.tokens_per_s,
        "elapsed_s": row.elapsed,
        "verdict": verdict.value if verdict else None,
        "counters_settled": row.counters_settled,
    }


def table_row(row: PhaseRow) -> list[Cell]:
    flat = flat_row(row)
    return [
        flat["temperature"],
        flat["source"],
        flat["requests"],
        flat["errors"],
        flat["acceptance_rate"],
        flat["acceptance_rate_p10"],
        flat["acceptance_rate_p50"],
        flat["acceptance_rate_p90"],
        flat["mean_acceptance_length"],
        flat["ttft_p50_ms"],
        flat["ttft_p99_ms"],
        flat["tpot_p50_ms"],
        flat["tpot_p99_ms"],
        flat["tokens_per_s"],
        flat["verdict"],
    ]


def render_sweep(result: SweepResult, config: SweepConfig) -> str:
    """The headline, the source, one table row per temperature (in run order), then notes."""
    table = render_table(TABLE_HEADERS, [table_row(row) for row in result.rows], digits=2)
    lines = [headline(result, config), source_line(result, config), "", table]
    notes = sweep_notes(result, config)
    return "\n".join([*lines, *(["", *notes] if notes else [])])


def headline(result: SweepResult, config: SweepConfig) -> str:
    mode = "streaming" if config.stream else "non-streaming"
    return (
        f"model {result.model or '?'} at {config.url}: {len(config.temperatures)} temperatures x "
        f"{config.requests} requests, concurrency {config.concurrency}, max_tokens "
        f"{config.max_tokens}, {mode}, seed {config.seed}"
    )


def source_line(result: SweepResult, config: SweepConfig) -> str:
    if result.source is None:
        return "acceptance source: none (no phase had a successful request)"
    return "acceptance source: " + SOURCE_TEXT[result.source].format(
        metrics=config.metrics_base_url
    )


def sweep_notes(result: SweepResult, config: SweepConfig) -> list[str]:
    """Lines under the table: what is missing and why, errors by kind, unsettled counters."""
    notes = []
    if not config.stream:
        notes.append("TTFT and TPOT are measured on streamed requests only (add --stream).")
    for row in result.rows:
        notes += row_notes(row, config)
    return notes


def row_notes(row: PhaseRow, config: SweepConfig) -> list[str]:
    notes = []
    spec = row.acceptance
    if row.load.errors_by_kind:
        kinds = ", ".join(f"{kind} {count}" for kind, count in row.load.errors_by_kind.items())
        notes.append(f"T={row.label}: errors by kind: {kinds}")
    if row.succeeded == 0:
        notes.append(f"T={row.label}: no successful request, no figures.")
    missing = row.succeeded - (spec.requests_with_metrics or 0) if spec else 0
    if spec and spec.source == "per-request" and missing:
        notes.append(
            f"T={row.label}: {missing} of {row.succeeded} successful requests carried "
            "no per-request metrics (not counted)."
        )
    if row.counters_settled is False:
        notes.append(
            f"T={row.label}: counters still moving after {config.settle_timeout:g} s; "
            "the last requests may be missing from the figures."
        )
    return notes


def row_json(row: PhaseRow) -> dict[str, Any]:
    flat = flat_row(row)
    return {
        "temperature": flat["temperature"],
        "source": flat["source"],
        "requests": flat["requests"],
        "succeeded": flat["succeeded"],
        "errors": flat["errors"],
        "errors_by_kind": row.load.errors_by_kind,
        "elapsed_s": flat["elapsed_s"],
        "acceptance_rate": flat["acceptance_rate"],
        "per_request_acceptance_rate": {
            "p10": flat["acceptance_rate_p10"],
            "p50": flat["acceptance_rate_p50"],
            "p90": flat["acceptance_rate_p90"],
        },
        "mean_acceptance_length": flat["mean_acceptance_length"],
        "counts": {key: flat[key] for key in ("drafts", "draft_tokens", "accepted_tokens")},
        "requests_with_metrics": flat["requests_with_metrics"],
        "requests_not_drafting": flat["requests_not_drafting"],
        "ttft_ms": {"p50": flat["ttft_p50_ms"], "p99": flat["ttft_p99_ms"]},
        "tpot_ms": {"p50": flat["tpot_p50_ms"], "p99": flat["tpot_p99_ms"]},
        "output_tokens": flat["output_tokens"],
        "tokens_per_s": flat["tokens_per_s"],
        "verdict": flat["verdict"],
        "counters_settled": flat["counters_settled"],
    }


def sweep_json(result: SweepResult, config: SweepConfig) -> dict[str, Any]:
    """The ``--json`` object: the run's settings, then one object per phase in run order."""
    return {
        "model": result.model,
        "url": config.url,
        "metrics_url": config.metrics_base_url,
        "source_requested": config.source,
        "source": result.source,
        "requests_per_temperature": config.requests,
        "concurrency": config.concurrency,
        "max_tokens": config.max_tokens,
        "stream": config.stream,
        "seed": config.seed,
        "phases": [row_json(row) for row in result.rows],
    }


def csv_cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def sweep_csv(result: SweepResult) -> str:
    """A header line, then one line per phase; an empty cell is "no data"."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in result.rows:
        flat = flat_row(row)
        writer.writerow([csv_cell(flat[column]) for column in CSV_COLUMNS])
    return buffer.getvalue()

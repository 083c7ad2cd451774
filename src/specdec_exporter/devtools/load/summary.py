"""Turn a run's summary rows into the terminal table or the ``--json`` object (no I/O)."""

from __future__ import annotations

from typing import Any

from specdec_exporter.devtools.load.results import LoadResult
from specdec_exporter.devtools.load.stats import SpecSummary, TemperatureRow, summarise
from specdec_exporter.term import Cell, render_table

LATENCY_HEADERS = ["TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms"]
SPEC_HEADERS = ["accept rate", "accept len"]


def milliseconds(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def table_row(row: TemperatureRow, with_spec: bool) -> list[Cell]:
    cells: list[Cell] = [
        row.label,
        row.requests,
        row.errors,
        row.output_tokens,
        row.tokens_per_s,
        *map(milliseconds, (row.ttft_p50, row.ttft_p99, row.tpot_p50, row.tpot_p99)),
    ]
    if with_spec:
        cells += [
            row.spec.acceptance_rate if row.spec else None,
            row.spec.mean_acceptance_length if row.spec else None,
        ]
    return cells


def render_summary(result: LoadResult, rows: list[TemperatureRow]) -> str:
    """The headline, the per-temperature table with its total row, and the errors by kind."""
    with_spec = any(row.spec is not None for row in rows)
    headers = ["temperature", "requests", "errors", "out tokens", "tokens/s", *LATENCY_HEADERS]
    headers += SPEC_HEADERS if with_spec else []
    table = render_table(headers, [table_row(row, with_spec) for row in rows], digits=2)
    lines = [headline(result), "", table]
    total = rows[-1]
    if total.errors_by_kind:
        kinds = ", ".join(f"{kind} {count}" for kind, count in total.errors_by_kind.items())
        lines += ["", f"errors by kind: {kinds}"]
    return "\n".join(lines)


def headline(result: LoadResult) -> str:
    count = len(result.results)
    rate = count / result.elapsed if result.elapsed > 0 else 0.0
    return (
        f"model {result.model}, endpoint {result.endpoint}: {count} requests "
        f"({result.succeeded} ok) in {result.elapsed:.2f} s, {rate:.2f} requests/s"
    )


def spec_json(spec: SpecSummary | None) -> dict[str, Any] | None:
    if spec is None:
        return None
    return {
        "requests": spec.requests,
        "num_spec_steps": spec.num_spec_steps,
        "num_draft_tokens": spec.num_draft_tokens,
        "num_accepted_draft_tokens": spec.num_accepted_draft_tokens,
        "acceptance_rate": spec.acceptance_rate,
        "mean_acceptance_length": spec.mean_acceptance_length,
    }


def row_json(row: TemperatureRow) -> dict[str, Any]:
    return {
        "temperature": row.label,
        "requests": row.requests,
        "errors": row.errors,
        "errors_by_kind": row.errors_by_kind,
        "output_tokens": row.output_tokens,
        "tokens_per_s": row.tokens_per_s,
        "ttft_ms": {"p50": milliseconds(row.ttft_p50), "p99": milliseconds(row.ttft_p99)},
        "tpot_ms": {"p50": milliseconds(row.tpot_p50), "p99": milliseconds(row.tpot_p99)},
        "spec": spec_json(row.spec),
    }


def summary_json(result: LoadResult, rows: list[TemperatureRow]) -> dict[str, Any]:
    """The ``--json`` object: the same rows as the table, the total row apart."""
    return {
        "model": result.model,
        "endpoint": result.endpoint,
        "elapsed_s": result.elapsed,
        "requests": len(result.results),
        "succeeded": result.succeeded,
        "buckets": [row_json(row) for row in rows[:-1]],
        "total": row_json(rows[-1]),
    }


def summary_rows(result: LoadResult) -> list[TemperatureRow]:
    return summarise(result.results, result.elapsed)

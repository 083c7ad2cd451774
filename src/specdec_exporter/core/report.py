"""Window counts -> per-engine and per-model report entries (the figures `check`, `/` and the
collector show). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from specdec_exporter.core.acceptance import (
    Totals,
    Verdict,
    estimated_speedup,
    figures,
    sum_totals,
    verdict,
)
from specdec_exporter.core.exposition import SeriesKey, Snapshot
from specdec_exporter.core.timeline import Window

ALL_ENGINES = "all"
LEGACY_V0 = "legacy V0: see its own gauges"


def snapshot_totals(snapshot: Snapshot) -> dict[SeriesKey, Totals]:
    """The cumulative counts of a snapshot per (model, engine), spec counters and generation."""
    keys = snapshot.counters.keys() | snapshot.generation_tokens.keys()
    totals = {}
    for key in keys:
        counters = snapshot.counters.get(key)
        generated = snapshot.generation_tokens.get(key, 0.0)
        if counters is None:
            totals[key] = Totals(generation_tokens=generated)
        else:
            totals[key] = Totals(
                counters.drafts,
                counters.draft_tokens,
                counters.accepted_tokens,
                counters.accepted_per_position,
                generated,
            )
    return totals


@dataclass(frozen=True)
class Entry:
    """The figures of one (model, engine) or of one model over all its engines."""

    model_name: str
    engine: str
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance_rate: list[float | None]
    draft_share: float | None
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    generation_tokens: float
    drafts_per_second: float | None
    estimated_speedup: float | None
    verdict: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def entry(
    model_name: str,
    engine: str,
    counts: Totals,
    *,
    seconds: float,
    enabled: bool,
    k: int | None,
    cost_ratio: float,
) -> Entry:
    derived = figures(counts)
    speedup = (
        None
        if derived.mean_acceptance_length is None or k is None
        else estimated_speedup(derived.mean_acceptance_length, k, cost_ratio)
    )
    return Entry(
        model_name=model_name,
        engine=engine,
        acceptance_rate=derived.acceptance_rate,
        mean_acceptance_length=derived.mean_acceptance_length,
        per_position_acceptance_rate=list(derived.per_position_acceptance_rate),
        draft_share=derived.draft_share,
        drafts=counts.drafts,
        draft_tokens=counts.draft_tokens,
        accepted_tokens=counts.accepted_tokens,
        generation_tokens=counts.generation_tokens,
        drafts_per_second=counts.drafts / seconds if seconds > 0 else None,
        estimated_speedup=speedup,
        verdict=verdict(enabled, counts.drafts, derived.acceptance_rate, speedup).value,
    )


def build_report(snapshot: Snapshot, window: Window[SeriesKey], cost_ratio: float) -> list[Entry]:
    """One entry per (model, engine), then one ``engine="all"`` entry per model (summed first)."""
    entries: list[Entry] = []
    for model in sorted(snapshot.models):
        entries.extend(_model_entries(model, snapshot, window, cost_ratio))
    return entries


def _model_entries(
    model: str, snapshot: Snapshot, window: Window[SeriesKey], cost_ratio: float
) -> list[Entry]:
    k = snapshot.num_speculative_tokens(model)
    per_engine = {engine: counts for (m, engine), counts in window.deltas.items() if m == model}

    def make(engine: str, counts: Totals) -> Entry:
        return entry(model, engine, counts, seconds=window.seconds,
                     enabled=snapshot.spec_decode_enabled, k=k, cost_ratio=cost_ratio)

    rows = [make(engine, per_engine[engine]) for engine in sorted(per_engine, key=_engine_order)]
    rows.append(make(ALL_ENGINES, sum_totals(per_engine.values())))
    if model in snapshot.legacy_v0:  # V0's counters are not true counts: no window verdict
        rows = [replace(row, verdict=LEGACY_V0) for row in rows]
    return rows


def overall_verdict(entries: list[Entry]) -> Verdict:
    """The worst verdict among the per-model aggregates."""
    aggregates = [Verdict(e.verdict) for e in entries
                  if e.engine == ALL_ENGINES and e.verdict != LEGACY_V0]
    if not aggregates:
        return Verdict.NOT_ENABLED
    return max(aggregates, key=lambda v: (v.exit_code, v != Verdict.NOT_DRAFTING))


def _engine_order(engine: str) -> tuple[int, str]:
    numeric = engine.isascii() and engine.isdigit()  # "²".isdigit(), but int("²") raises
    return (int(engine), "") if numeric else (1 << 30, engine)

"""Window counts -> report entries per engine, per model and per temperature bucket (the figures
and verdicts `check`, `/`, `/api/report` and the collector show). Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from specdec_exporter.core.acceptance import Totals, figures, ratio, sum_totals
from specdec_exporter.core.buckets import label_order
from specdec_exporter.core.model import DraftCost, break_even_acceptance_rate, modelled_speedup
from specdec_exporter.core.parse import SeriesKey, Snapshot
from specdec_exporter.core.timeline import Window
from specdec_exporter.core.values import ascii_count, finite_or_none
from specdec_exporter.core.verdict import DEFAULT_CRITERIA, Criteria, Verdict, verdict, worst

ALL_ENGINES = "all"
LEGACY_V0 = "legacy V0: see its own gauges"

BucketKey = tuple[str, str]
"""(model_name, temperature_bucket)."""
R = TypeVar("R")


@dataclass(frozen=True)
class Entry:
    """The figures of one (model, engine) or of one model over all its engines."""

    model_name: str
    engine: str
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance_rate: list[float | None]
    draft_share: float | None
    drafts: float | None
    draft_tokens: float | None
    accepted_tokens: float | None
    generation_tokens: float | None
    """The window's counts; None only where a count is not a finite number."""
    drafts_per_second: float | None
    estimated_speedup: float | None
    """Modelled: L / (1 + k·c), c from `draft_cost_ratio_source`."""
    break_even_acceptance_rate: float | None
    threshold: float
    draft_cost_ratio: float
    draft_cost_ratio_source: str
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
    cost: DraftCost,
    criteria: Criteria,
) -> Entry:
    derived = figures(counts)
    length, rate = derived.mean_acceptance_length, derived.acceptance_rate
    speedup = None if length is None or k is None else modelled_speedup(length, k, cost.ratio)
    break_even = (
        None if k is None else break_even_acceptance_rate(k, cost.ratio, derived.mean_draft_length)
    )
    return Entry(
        model_name=model_name,
        engine=engine,
        acceptance_rate=rate,
        mean_acceptance_length=length,
        per_position_acceptance_rate=list(derived.per_position_acceptance_rate),
        draft_share=derived.draft_share,
        drafts=finite_or_none(counts.drafts),
        draft_tokens=finite_or_none(counts.draft_tokens),
        accepted_tokens=finite_or_none(counts.accepted_tokens),
        generation_tokens=finite_or_none(counts.generation_tokens),
        drafts_per_second=ratio(counts.drafts, seconds),
        estimated_speedup=speedup,
        break_even_acceptance_rate=break_even,
        threshold=criteria.threshold,
        draft_cost_ratio=cost.ratio,
        draft_cost_ratio_source=cost.source,
        verdict=verdict(
            enabled, counts.drafts, rate, speedup=speedup, break_even=break_even, criteria=criteria
        ).value,
    )


def build_report(
    snapshot: Snapshot,
    window: Window[SeriesKey],
    cost: DraftCost,
    criteria: Criteria = DEFAULT_CRITERIA,
) -> list[Entry]:
    """One entry per (model, engine), then one ``engine="all"`` entry per model (summed first)."""
    entries: list[Entry] = []
    for model in sorted(snapshot.models):
        entries.extend(_model_entries(model, snapshot, window, cost, criteria))
    return entries


def _model_entries(
    model: str, snapshot: Snapshot, window: Window[SeriesKey], cost: DraftCost, criteria: Criteria
) -> list[Entry]:
    k = snapshot.num_speculative_tokens(model)
    per_engine = {engine: counts for (m, engine), counts in window.deltas.items() if m == model}

    def make(engine: str, counts: Totals) -> Entry:
        return entry(
            model,
            engine,
            counts,
            seconds=window.seconds,
            enabled=snapshot.spec_decode_enabled,
            k=k,
            cost=cost,
            criteria=criteria,
        )

    rows = [make(engine, per_engine[engine]) for engine in sorted(per_engine, key=_engine_order)]
    rows.append(make(ALL_ENGINES, sum_totals(per_engine.values())))
    if model in snapshot.legacy_v0:  # V0's counters are not true counts: no window verdict
        rows = [replace(row, verdict=LEGACY_V0) for row in rows]
    return rows


def rows_to_show(rows: Sequence[R], key: Callable[[R], tuple[str, str]]) -> list[R]:
    """The rows a person reads, in order: a model's ``engine="all"`` row only when the model has
    more than one engine row (with one, it repeats that row). ``key`` gives (model, engine)."""
    engines = Counter(model for model, engine in map(key, rows) if engine != ALL_ENGINES)
    return [row for row in rows if key(row)[1] != ALL_ENGINES or engines[key(row)[0]] != 1]


def bucket_entries(
    snapshot: Snapshot,
    deltas: Mapping[BucketKey, Totals],
    *,
    seconds: float,
    cost: DraftCost,
    criteria: Criteria,
) -> dict[BucketKey, Entry]:
    """The request tap's figures per (model, temperature bucket) over a window: the same ``entry``
    as a model's rows, with the model's k, and engine "all" (the tap sees no engine)."""
    return {
        (model, bucket): entry(
            model,
            ALL_ENGINES,
            counts,
            seconds=seconds,
            enabled=snapshot.spec_decode_enabled,
            k=snapshot.num_speculative_tokens(model),
            cost=cost,
            criteria=criteria,
        )
        for (model, bucket), counts in sorted(
            deltas.items(), key=lambda item: (item[0][0], label_order(item[0][1]))
        )
    }


NOT_PER_BUCKET = ("engine", "per_position_acceptance_rate", "draft_share", "generation_tokens")
"""Entry fields the tap cannot know per bucket (it sees no per-position or generation counts)."""


def bucket_json(key: BucketKey, bucket: Entry) -> dict[str, Any]:
    """A bucket's entry as JSON (`/api/report`, `check --json`): the fields the tap can know."""
    figures = {
        name: value for name, value in bucket.as_json().items() if name not in NOT_PER_BUCKET
    }
    return {"model_name": key[0], "temperature_bucket": key[1], **figures}


def overall_verdict(entries: list[Entry]) -> Verdict:
    """The worst verdict among the per-model aggregates."""
    aggregates = [
        Verdict(e.verdict) for e in entries if e.engine == ALL_ENGINES and e.verdict != LEGACY_V0
    ]
    return worst(aggregates) or Verdict.NOT_ENABLED


def _engine_order(engine: str) -> tuple[int, str]:
    index = ascii_count(engine)  # "²".isdigit(), but int("²") raises
    return (index, "") if index is not None else (1 << 30, engine)

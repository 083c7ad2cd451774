"""vLLM's counters around a load phase: the reset-aware delta, whether they have settled, and
how long to watch them. Shared by `sweep` and `calibrate`; no I/O (callers scrape).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from specdec_exporter.core.acceptance import Totals, sum_totals, totals_delta
from specdec_exporter.core.parse import SeriesKey, Snapshot
from specdec_exporter.core.timeline import Timeline
from specdec_exporter.devtools.load.results import RequestResult


class Settling(BaseModel):
    """How long a phase's counters may take to count its last requests (`calibrate` takes it as
    a flag)."""

    settle_timeout: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="seconds to wait for vLLM's counters after a phase",
    )


class CounterWatch(Settling):
    """How `sweep` and `calibrate` watch vLLM's counters settle after a phase."""

    settle_interval: float = Field(default=0.05, gt=0)
    """Seconds between the scrapes that watch the counters settle."""
    scrape_timeout: float = Field(default=10.0, gt=0)
    """Timeout of one scrape of a server's /metrics, seconds."""


@dataclass(frozen=True)
class CounterReading:
    """A scrape's spec counts per (model, engine), and whether spec decoding is exposed."""

    totals: dict[SeriesKey, Totals]
    spec_enabled: bool

    @classmethod
    def of(cls, snapshot: Snapshot) -> CounterReading:
        return cls(dict(snapshot.counters), snapshot.spec_decode_enabled)


def phase_delta(before: CounterReading, after: CounterReading, model: str) -> Totals:
    """Reset-aware counter delta over the phase, summed over engines of the model."""
    timeline: Timeline[SeriesKey] = Timeline(window=math.inf)
    timeline.observe(0.0, before.totals)
    timeline.observe(1.0, after.totals)
    return model_totals(timeline.window().deltas, model)


def model_totals(totals: Mapping[SeriesKey, Totals], model: str) -> Totals:
    """Sum over engines of ``model``'s series; of every series when the server names none so.

    Through a tap the request's model name may be an alias of vLLM's ``model_name`` label; one
    model per server (vLLM) makes the sum over all series the right fallback.
    """
    own = [counts for (name, _), counts in totals.items() if name == model]
    return sum_totals(own if own else totals.values())


def expected_generation_tokens(results: Sequence[RequestResult]) -> int | None:
    """Output tokens the server reported for the phase; None if some success had no usage."""
    succeeded = [result for result in results if result.ok]
    if not all(result.tokens_from_usage for result in succeeded):
        return None
    return sum(result.output_tokens or 0 for result in succeeded)


def counters_settled(
    before: Totals, previous: Totals, current: Totals, expected_generation: int | None
) -> bool:
    """True when two consecutive scrapes agree and the generated tokens reached the expected.

    vLLM's counters move a moment after a response completes, so two scrapes taken before the
    last step is recorded would also agree; the generation-token count (recorded in the same
    step as the spec counters) tells the stale case apart.
    """
    if current != previous:
        return False
    if expected_generation is None:
        return True
    return totals_delta(before, current).generation_tokens >= expected_generation

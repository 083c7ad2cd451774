"""What one finished sequence adds to vLLM's speculative counters, from its per-sequence figures.

Pure and standard library only. vLLM's scheduler counts each verify step of a sequence that had
draft tokens twice over: once into the step's ``SpecDecodingStats.observe_draft(d, a)`` (the
``vllm:spec_decode_*`` counters) and once into that sequence's ``RequestSpecDecodeMetrics.observe(d,
a)``: ``histogram[a] += 1`` and ``num_draft_tokens += d`` (both with grammar-invalidated drafts
already taken out). So, per sequence:

- drafts = sum(histogram) (each verify step is one draft);
- draft tokens = num_draft_tokens;
- accepted tokens = sum(j * histogram[j]);
- accepted at position i = steps that accepted more than i drafts = sum(histogram[i + 1:])
  (``observe_draft`` adds one to positions 0..a-1).

Everything here validates a whole sequence (or step) before the caller increments anything, so a
rejected one moves no counter: a count that is not a whole number >= 0, more accepted than drafted
tokens, or more positions than vLLM's configured k raise ``ValueError`` (counted by the caller as an
error of its hook), never a new series.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import NamedTuple


def count(value: object) -> int:
    """A count vLLM gives: a whole number >= 0 (an ``int`` or anything ``operator.index`` takes,
    not a bool), else ValueError."""
    if isinstance(value, bool):
        raise ValueError("a count is a bool")
    try:
        whole = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError("a count is not a whole number") from None
    if whole < 0:
        raise ValueError("a negative count")
    return whole


DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, PER_POSITION = 0, 1, 2, 3
"""``sequence_figures``' amounts: drafts, draft tokens, accepted tokens, then one per position."""


def sequence_figures(
    histogram: Sequence[int], num_draft_tokens: int, k: int | None = None
) -> tuple[list[int], float | None]:
    """``histogram[j]`` = verify steps that accepted exactly j drafts; ``k`` (vLLM's configured
    number of speculative tokens) bounds the positions: a histogram longer than k + 1 is refused.
    Returns the amounts (``DRAFTS``, ``DRAFT_TOKENS``, ``ACCEPTED_TOKENS``, then accepted at
    each position 0..len(histogram) - 2 from ``PER_POSITION``) and the acceptance rate
    (accepted / draft tokens; None when the sequence never drafted).

    Runs once per finished sequence on vLLM's output path: plain ints >= 0 (what vLLM gives)
    take one loop; anything else goes through ``count``, which raises for what no count is. A
    list and a plain tuple, no named tuple: its constructor is a Python call, a few microseconds
    cold (BENCHMARKS.md, issue 30)."""
    counts = list(histogram)
    for value in counts:
        if type(value) is not int or value < 0:
            counts = [count(value) for value in counts]
            break
    if k is not None and len(counts) > k + 1:
        raise ValueError("more positions than the configured speculative tokens")
    draft_tokens = num_draft_tokens
    if type(draft_tokens) is not int or draft_tokens < 0:
        draft_tokens = count(draft_tokens)
    drafts = remaining = sum(counts)
    amounts = [drafts, draft_tokens, 0]
    accepted = 0
    for steps in counts[:-1]:  # accepted at position i: the steps that accepted more than i
        remaining -= steps
        accepted += remaining  # the sum over positions = sum(j * counts[j])
        amounts.append(remaining)
    if accepted > draft_tokens:
        raise ValueError("more accepted than drafted tokens")
    amounts[ACCEPTED_TOKENS] = accepted
    return amounts, (accepted / draft_tokens if draft_tokens else None)


class StepFigures(NamedTuple):
    """One engine step's ``SpecDecodingStats`` and its running batch, validated."""

    running: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int


def step_figures(
    running: object, drafts: object, draft_tokens: object, accepted_tokens: object
) -> StepFigures:
    figures = StepFigures(
        count(running), count(drafts), count(draft_tokens), count(accepted_tokens)
    )
    if figures.accepted_tokens > figures.draft_tokens:
        raise ValueError("more accepted than drafted tokens")
    return figures


def seconds(value: object) -> float:
    """A duration vLLM measured: a finite number >= 0, else ValueError (a NaN or negative sum
    would poison the histogram for as long as vLLM runs)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("a duration is not a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError("a duration is not finite and >= 0")
    return float(value)


def time_per_output_token(
    first_token_ts: float, last_token_ts: float, num_generation_tokens: int
) -> float:
    """vLLM's ``mean_time_per_output_token`` (``IterationStats.update_from_finished_request``):
    decode time over the tokens after the first, 0 with fewer than two tokens."""
    if num_generation_tokens - 1 > 0:
        return (last_token_ts - first_token_ts) / (num_generation_tokens - 1)
    return 0

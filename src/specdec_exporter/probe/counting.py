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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class SequenceFigures(NamedTuple):
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]
    """One entry per position 0..k-1 (k = len(histogram) - 1)."""

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft tokens; None when the sequence never drafted."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None


def sequence_figures(histogram: Sequence[int], num_draft_tokens: int) -> SequenceFigures:
    """``histogram[j]`` = verify steps that accepted exactly j drafts."""
    counts = [int(count) for count in histogram]
    per_position = []
    remaining = sum(counts)
    for count in counts[:-1]:
        remaining -= count
        per_position.append(remaining)
    return SequenceFigures(
        drafts=sum(counts),
        draft_tokens=int(num_draft_tokens),
        accepted_tokens=sum(j * count for j, count in enumerate(counts)),
        accepted_per_position=tuple(per_position),
    )


def time_per_output_token(
    first_token_ts: float, last_token_ts: float, num_generation_tokens: int
) -> float:
    """vLLM's ``mean_time_per_output_token`` (``IterationStats.update_from_finished_request``):
    decode time over the tokens after the first, 0 with fewer than two tokens."""
    if num_generation_tokens - 1 > 0:
        return (last_token_ts - first_token_ts) / (num_generation_tokens - 1)
    return 0

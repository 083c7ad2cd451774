"""Acceptance model grounded in rejection sampling: P(accept) = overlap of target and draft.

The drafter is a perturbation of the target over a small vocabulary (see docs/simulator.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

GREEDY_EPSILON = 1e-5
VOCABULARY_SIZE = 64
CONTEXT_COUNT = 256
MAX_TEMPERATURE = 2.0
GRID_STEP = 0.05
GAP_MEAN = 1.5
"""Mean logit gap between the target's top token and its runner-up."""
TAIL_SLOPE = 1.0
"""Tail logits fall as -slope * ln(rank): a Zipf tail."""
KNOWLEDGE_DECAY = 12.0
"""P(drafter knows the token at rank r) = quality ** (1 + decay * ln(1 + r))."""
NOISE_SCALE = 1.0
"""Logit noise on known tokens: N(0, (scale * (1 - quality))^2)."""
CONTEXT_SEED = 20231117
MAX_CACHED_ROWS = 1024
CONTEXT_SWITCH_RATE = 0.2
"""Within a verify step, chance that the next drafted position falls in a different context."""


@dataclass(frozen=True)
class Context:
    """One next-token situation: target logits by rank and the draws that fix the drafter's view."""

    logits: tuple[float, ...]
    knowledge_draws: tuple[float, ...]
    noise: tuple[float, ...]


def make_contexts(count: int = CONTEXT_COUNT, seed: int = CONTEXT_SEED) -> tuple[Context, ...]:
    rng = random.Random(seed)
    contexts = []
    for _ in range(count):
        gap = rng.expovariate(1.0 / GAP_MEAN)
        logits = (0.0, *(-gap - TAIL_SLOPE * math.log(rank) for rank in range(1, VOCABULARY_SIZE)))
        draws = tuple(rng.random() for _ in range(VOCABULARY_SIZE))
        noise = tuple(rng.gauss(0.0, 1.0) for _ in range(VOCABULARY_SIZE))
        contexts.append(Context(logits=logits, knowledge_draws=draws, noise=noise))
    return tuple(contexts)


def knows_token(rank: int, quality: float, draw: float) -> bool:
    return draw < float(quality ** (1.0 + KNOWLEDGE_DECAY * math.log1p(rank)))


def draft_logits(context: Context, quality: float) -> list[float]:
    sigma = NOISE_SCALE * (1.0 - quality)
    return [z + sigma * n for z, n in zip(context.logits, context.noise, strict=True)]


def softmax(logits: Sequence[float], temperature: float) -> list[float]:
    top = max(logits)
    weights = [math.exp((z - top) / temperature) for z in logits]
    total = sum(weights)
    return [w / total for w in weights]


def context_acceptance(context: Context, temperature: float, quality: float) -> float:
    """P(accept a drafted token) in this context: overlap of target and draft at temperature T."""
    known = [knows_token(rank, quality, draw) for rank, draw in enumerate(context.knowledge_draws)]
    drafted = draft_logits(context, quality)
    if temperature < GREEDY_EPSILON:
        best = max(range(len(drafted)), key=drafted.__getitem__)
        return 1.0 if best == 0 and known[0] else 0.0
    target = softmax(context.logits, temperature)
    draft = softmax(drafted, temperature)
    return sum(min(p, q) for p, q, k in zip(target, draft, known, strict=True) if k)


class AcceptanceModel:
    """Per-context acceptance on a temperature grid, computed lazily and interpolated in between."""

    def __init__(self, contexts: tuple[Context, ...] | None = None) -> None:
        self.contexts = contexts if contexts is not None else make_contexts()
        self._grid: dict[tuple[float, int], tuple[float, ...]] = {}

    @property
    def context_count(self) -> int:
        return len(self.contexts)

    def grid_row(self, quality: float, index: int) -> tuple[float, ...]:
        """Acceptance of every context at temperature index * GRID_STEP (memoised)."""
        key = (quality, index)
        row = self._grid.get(key)
        if row is None:
            if len(self._grid) >= MAX_CACHED_ROWS:  # a long sweep over qualities
                self._grid.clear()
            temperature = index * GRID_STEP
            row = tuple(context_acceptance(c, temperature, quality) for c in self.contexts)
            self._grid[key] = row
        return row

    def acceptances(
        self, temperature: float, quality: float, indices: Sequence[int]
    ) -> list[float]:
        """Acceptance of the given contexts at any T in [0, 2], linear between grid points."""
        if temperature < GREEDY_EPSILON:
            row = self.grid_row(quality, 0)
            return [row[i] for i in indices]
        position = min(temperature, MAX_TEMPERATURE) / GRID_STEP
        low = min(int(position), round(MAX_TEMPERATURE / GRID_STEP) - 1)
        weight = position - low
        below, above = self.grid_row(quality, low), self.grid_row(quality, low + 1)
        return [(1.0 - weight) * below[i] + weight * above[i] for i in indices]

    def mean_acceptance(self, temperature: float, quality: float) -> float:
        """Mean over all contexts: the expected per-token acceptance rate of a long run."""
        values = self.acceptances(temperature, quality, range(self.context_count))
        return sum(values) / len(values)


def sample_accepted(alphas: Sequence[float], drafted: int, rng: random.Random) -> int:
    """Accepted drafts of one verify step, stopping at the first rejection (rejection sampling).

    The step draws one of the request's contexts for the span it drafts, and each later position
    moves to another context with probability CONTEXT_SWITCH_RATE: how hard a span is to guess is
    shared by its tokens, which makes steps mostly all-or-nothing, as in real captures.
    """
    count = len(alphas)
    alpha = alphas[int(rng.random() * count)]
    accepted = 0
    for position in range(drafted):
        if position and rng.random() < CONTEXT_SWITCH_RATE:
            alpha = alphas[int(rng.random() * count)]
        if rng.random() >= alpha:
            break
        accepted += 1
    return accepted

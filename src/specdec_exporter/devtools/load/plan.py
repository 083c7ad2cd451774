"""What each request will be: temperature, streaming and prompt, dealt from seeded decks."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from specdec_exporter.devtools.load.mix import MixEntry, allocate

DURATION_DECK_SIZE = 100
"""Deck size when the run is bounded by time: the mix is exact over every 100 requests."""


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    temperature: float | None
    stream: bool
    prompt: str


def build_deck(
    mix: Sequence[MixEntry], stream_share: float, size: int, rng: random.Random
) -> list[tuple[float | None, bool]]:
    """``size`` (temperature, stream) pairs in the mix's proportions, shuffled by ``rng``.

    Temperature counts follow the weights exactly (largest remainder); within each
    temperature, the share of streaming requests is ``stream_share`` rounded the same way.
    """
    deck: list[tuple[float | None, bool]] = []
    counts = allocate([entry.weight for entry in mix], size)
    for entry, count in zip(mix, counts, strict=True):
        streamed, plain = allocate([stream_share, 1.0 - stream_share], count)
        deck += [(entry.temperature, True)] * streamed + [(entry.temperature, False)] * plain
    rng.shuffle(deck)
    return deck


class Planner:
    """Deals request plans in order; the same seed gives the same sequence of plans."""

    def __init__(
        self,
        mix: Sequence[MixEntry],
        stream_share: float,
        prompts: Sequence[str],
        *,
        deck_size: int,
        seed: int | None,
    ) -> None:
        if not prompts:
            raise ValueError("at least one prompt is needed")
        self._mix = tuple(mix)
        self._stream_share = stream_share
        self._prompts = tuple(prompts)
        self._deck_size = max(1, deck_size)
        self._rng = random.Random(seed)
        self._deck: list[tuple[float | None, bool]] = []
        self._issued = 0

    @property
    def issued(self) -> int:
        return self._issued

    def next_plan(self) -> PlannedRequest:
        if not self._deck:
            self._deck = build_deck(self._mix, self._stream_share, self._deck_size, self._rng)
            self._deck.reverse()  # pop() from the end deals the shuffled order front to back
        temperature, stream = self._deck.pop()
        prompt = self._prompts[self._rng.randrange(len(self._prompts))]
        plan = PlannedRequest(self._issued, temperature, stream, prompt)
        self._issued += 1
        return plan

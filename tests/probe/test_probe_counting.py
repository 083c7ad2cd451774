"""One sequence's figures from its histogram, counted as vLLM's step counters count them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec_exporter.probe.counting import sequence_figures, time_per_output_token


def observe_draft_totals(
    steps: list[tuple[int, int]], k: int, extra: int = 0
) -> tuple[list[int], float | None]:
    """vLLM's ``SpecDecodingStats.observe_draft`` over (draft tokens, accepted) steps, in
    ``sequence_figures``' shape: drafts, draft tokens (+ ``extra``), accepted tokens, accepted
    per position; the acceptance rate."""
    per_position = [0] * k
    for _, accepted in steps:
        for position in range(accepted):
            per_position[position] += 1
    draft_tokens = sum(drafted for drafted, _ in steps) + extra
    accepted_tokens = sum(accepted for _, accepted in steps)
    rate = accepted_tokens / draft_tokens if draft_tokens else None
    return [len(steps), draft_tokens, accepted_tokens, *per_position], rate


def test_a_histogram_gives_the_step_counters_of_its_steps() -> None:
    steps = [(4, 0), (4, 0), (4, 0), (4, 1), (4, 2), (4, 2), (4, 4), (3, 4)]
    histogram = [3, 1, 2, 0, 2]
    figures = sequence_figures(histogram, 31)
    assert figures == ([8, 31, 13, 5, 4, 2, 2], 13 / 31)
    assert figures == observe_draft_totals(steps, 4)


def test_a_sequence_that_never_drafted() -> None:
    assert sequence_figures([0, 0, 0], 0) == ([0, 0, 0, 0, 0], None)


def test_time_per_output_token_as_vllm_computes_it() -> None:
    assert time_per_output_token(10.0, 12.0, 5) == 0.5
    assert time_per_output_token(10.0, 10.0, 1) == 0
    assert time_per_output_token(0.0, 0.0, 0) == 0


@given(
    steps=st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 4)).map(lambda s: (max(s), min(s))),
        max_size=40,
    ),
    extra=st.integers(0, 3),
)
def test_any_steps_give_the_step_counters_of_their_steps(
    steps: list[tuple[int, int]], extra: int
) -> None:
    """vLLM's histogram and draft tokens of any (drafted, accepted) steps, k = 4: the one-loop
    figures equal vLLM's per-step counting, whole numbers of any int-like type alike."""
    histogram = [0] * 5
    for _, accepted in steps:
        histogram[accepted] += 1
    drafted = sum(d for d, _ in steps)
    assert sequence_figures(histogram, drafted, 4) == observe_draft_totals(steps, 4)
    assert sequence_figures(
        tuple(map(Index, histogram)), Index(drafted + extra), 4
    ) == observe_draft_totals(steps, 4, extra)


class Index:
    """An int-like that is not an int (a numpy integer, say): operator.index takes it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


@pytest.mark.parametrize(
    ("histogram", "draft_tokens"),
    [([1, -1, 0], 4), ([1, True, 0], 4), ([1, 1.0, 0], 4), ([1, 1, 0], -1), ([0, 0, 3], 5)],
)
def test_what_no_count_can_be_is_refused(histogram: list[object], draft_tokens: int) -> None:
    with pytest.raises(ValueError):
        sequence_figures(histogram, draft_tokens, 2)  # type: ignore[arg-type]

"""The simulator's pure models: acceptance by rejection sampling, step time, configuration."""

from __future__ import annotations

import hashlib
import itertools
import random

import pytest

from specdec_exporter.devtools.sim.acceptance import (
    AcceptanceModel,
    Context,
    context_acceptance,
    make_contexts,
    sample_accepted,
)
from specdec_exporter.devtools.sim.settings import (
    KRange,
    SimConfig,
    SpeculativeConfig,
    parse_default_temperature,
    parse_speculative_config,
)
from specdec_exporter.devtools.sim.steptime import (
    StepTimeModel,
    mean_acceptance_length,
    modelled_speedup,
    step_time_model_for,
)
from specdec_exporter.options import ConfigError

MODEL = AcceptanceModel()
DEFAULT_QUALITY = SimConfig().drafter_quality


def test_default_drafter_accepts_about_08_greedy_and_04_at_t1() -> None:
    assert MODEL.mean_acceptance(0.0, DEFAULT_QUALITY) > 0.7
    assert 0.6 < MODEL.mean_acceptance(0.4, DEFAULT_QUALITY) < 0.8
    assert MODEL.mean_acceptance(1.0, DEFAULT_QUALITY) < 0.5
    assert MODEL.mean_acceptance(1.0, DEFAULT_QUALITY) > 0.3


@pytest.mark.parametrize("quality", [0.2, 0.5, 0.85, 0.95])
def test_acceptance_falls_as_temperature_rises_up_to_2(quality: float) -> None:
    curve = [MODEL.mean_acceptance(t / 10, quality) for t in range(21)]
    assert all(later <= earlier + 1e-3 for earlier, later in itertools.pairwise(curve))
    assert curve[0] > curve[5] > curve[10] > curve[15] > curve[20]


def test_acceptance_rises_with_drafter_quality() -> None:
    curve = [MODEL.mean_acceptance(0.7, q / 10) for q in range(11)]
    assert curve[0] == 0.0
    assert curve[-1] == pytest.approx(1.0)
    assert all(later > earlier for earlier, later in itertools.pairwise(curve))


def test_acceptance_is_the_overlap_of_target_and_draft() -> None:
    # Two tokens, the drafter knows both (draws 0) and has no noise (quality 1): q == p.
    context = Context(logits=(0.0, -1.0), knowledge_draws=(0.0, 0.0), noise=(0.0, 0.0))
    assert context_acceptance(context, 1.0, 1.0) == pytest.approx(1.0)
    # It does not know the runner-up (draw 0.99 >= quality ** ...): overlap = p(top) only.
    blind = Context(logits=(0.0, -1.0), knowledge_draws=(0.0, 0.99), noise=(0.0, 0.0))
    assert context_acceptance(blind, 1.0, 0.9) == pytest.approx(1 / (1 + 2.718281828**-1.0))


def test_greedy_acceptance_is_argmax_agreement() -> None:
    agree = Context(logits=(0.0, -3.0), knowledge_draws=(0.0, 0.0), noise=(0.0, 0.0))
    flipped = Context(logits=(0.0, -0.1), knowledge_draws=(0.0, 0.0), noise=(-5.0, 5.0))
    unknown_top = Context(logits=(0.0, -3.0), knowledge_draws=(0.999, 0.0), noise=(0.0, 0.0))
    assert context_acceptance(agree, 0.0, 0.5) == 1.0
    assert context_acceptance(flipped, 0.0, 0.5) == 0.0
    assert context_acceptance(unknown_top, 0.0, 0.5) == 0.0


def test_temperatures_between_grid_points_interpolate() -> None:
    low, high = MODEL.mean_acceptance(0.70, 0.85), MODEL.mean_acceptance(0.75, 0.85)
    assert high < MODEL.mean_acceptance(0.725, 0.85) < low


def test_contexts_are_the_same_for_every_run() -> None:
    """Pinned values: a change of seed, draw order or formula changes every simulated figure."""
    contexts = make_contexts(4)
    first = contexts[0]
    assert [f"{x:.12g}" for x in first.logits[:3]] == ["0", "-2.19841976272", "-2.89156694328"]
    assert [f"{x:.12g}" for x in first.knowledge_draws[:3]] == [
        "0.120993566798",
        "0.548604856201",
        "0.126694624123",
    ]
    assert [f"{x:.12g}" for x in first.noise[:3]] == [
        "-0.335157300038",
        "-0.93445760856",
        "1.72338650479",
    ]
    every_value = " ".join(
        f"{x:.12g}"
        for context in contexts
        for values in (context.logits, context.knowledge_draws, context.noise)
        for x in values
    )
    assert hashlib.sha256(every_value.encode()).hexdigest() == (
        "bec5e0fea06214367c13961e158bb179068893e0ca1eb8c20f53c6b330dfdf60"
    )


def test_sampling_stops_at_the_first_rejection() -> None:
    rng = random.Random(1)
    assert sample_accepted([1.0], 4, rng) == 4
    assert sample_accepted([0.0], 4, rng) == 0
    counts = [sample_accepted([0.5], 3, rng) for _ in range(4000)]
    assert set(counts) == {0, 1, 2, 3}
    assert sum(c == 0 for c in counts) == pytest.approx(2000, rel=0.1)


def test_sampled_acceptance_rate_matches_the_context_mean() -> None:
    rng = random.Random(2)
    alphas = MODEL.acceptances(0.0, 0.85, range(MODEL.context_count))
    accepted = sum(sample_accepted(alphas, 1, rng) for _ in range(20000))
    assert accepted / 20000 == pytest.approx(MODEL.mean_acceptance(0.0, 0.85), abs=0.02)


def test_speculation_wins_at_low_load_and_loses_at_high_load() -> None:
    draft_model = step_time_model_for("draft_model")
    assert modelled_speedup(draft_model, batch_size=1, k=4, alpha=0.8) > 1.4
    assert modelled_speedup(draft_model, batch_size=128, k=4, alpha=0.8) < 0.75
    ngram = step_time_model_for("ngram")
    assert modelled_speedup(ngram, batch_size=1, k=4, alpha=0.8) > 1.5
    assert modelled_speedup(ngram, batch_size=256, k=4, alpha=0.8) < 1.0


def test_step_cost_grows_with_batch_and_with_k() -> None:
    model = StepTimeModel()

    def cost(batch: int, k: int) -> float:
        return model.step_ms(
            prefill_tokens=0,
            decode_requests=batch,
            draft_tokens=batch * k,
            draft_passes=k,
            drafting_requests=batch if k else 0,
        )

    assert cost(1, 0) < cost(8, 0) < cost(64, 0)
    assert cost(8, 0) < cost(8, 2) < cost(8, 4)
    assert cost(1, 0) == pytest.approx(1.56)


def test_mean_acceptance_length_counts_the_bonus_token() -> None:
    assert mean_acceptance_length(0.0, 4) == 1.0
    assert mean_acceptance_length(1.0, 4) == 5.0
    assert mean_acceptance_length(0.5, 2) == pytest.approx(1.75)


def test_speculative_config_parses_vllm_json() -> None:
    spec = parse_speculative_config(
        '{"method": "eagle3", "model": "x", "num_speculative_tokens": 3}'
    )
    assert spec == SpeculativeConfig(
        method="eagle3", num_speculative_tokens=3, draft_model="x", draft_tensor_parallel_size=1
    )
    assert parse_speculative_config(None) is None
    assert parse_speculative_config(
        '{"model": "small", "num_speculative_tokens": 2}'
    ) == SpeculativeConfig(
        method="draft_model",
        num_speculative_tokens=2,
        draft_model="small",
        draft_tensor_parallel_size=1,
    )
    ngram = parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 2}')
    assert ngram is not None  # vLLM keeps the method's name as its model, and no draft TP
    assert (ngram.draft_model, ngram.draft_tensor_parallel_size) == ("ngram", None)


def test_k_schedule_by_batch_size_may_reach_zero() -> None:
    spec = parse_speculative_config(
        '{"method": "ngram", "num_speculative_tokens_per_batch_size": '
        "[[1, 4, 4], [5, 16, 2], [17, 1024, 0]]}"
    )
    assert spec is not None
    assert spec.num_speculative_tokens == 4
    assert spec.per_batch_size[1] == KRange(lo=5, hi=16, k=2)
    assert [spec.k_for_batch(b) for b in (1, 4, 5, 16, 17, 2000)] == [4, 4, 2, 2, 0, 4]


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1]",
        '{"method": "ngram"}',
        '{"method": "medusa", "num_speculative_tokens": 2}',
        '{"method": "magic", "num_speculative_tokens": 2}',
        '{"num_speculative_tokens": 2}',
        '{"method": "ngram", "num_speculative_tokens": 2, '
        '"num_speculative_tokens_per_batch_size": [[1, 2, 3]]}',
        '{"method": "ngram", "num_speculative_tokens_per_batch_size": [[4, 2, 1]]}',
    ],
)
def test_bad_speculative_configs_are_one_line_errors(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_speculative_config(text)
    assert "\n" not in str(caught.value)


def test_default_temperature_resolution_follows_vllm() -> None:
    assert parse_default_temperature(None, None, None) == 1.0
    assert parse_default_temperature(None, None, '{"temperature": 0.6}') == 0.6
    assert parse_default_temperature(None, '{"temperature": 0.3}', '{"temperature": 0.6}') == 0.3
    assert parse_default_temperature(0.9, '{"temperature": 0.3}', None) == 0.9


def test_config_rejects_out_of_range_values() -> None:
    with pytest.raises(ConfigError, match="drafter-quality"):
        SimConfig(drafter_quality=1.5)
    with pytest.raises(ConfigError, match="speed"):
        SimConfig(speed=0)
    with pytest.raises(ConfigError) as caught:
        SimConfig(max_num_seqs=0, port=70000)
    assert str(caught.value) == (
        "--port: Input should be less than or equal to 65535 (got 70000); "
        "--max-num-seqs: Input should be greater than or equal to 1 (got 0)"
    )
    assert SimConfig(data_parallel_size=2).multiprocess_metrics
    assert not SimConfig(data_parallel_size=2, api_server_count=1).multiprocess_metrics

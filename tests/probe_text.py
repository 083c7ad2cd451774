"""The engine probe's families as /metrics text, with literal counts: written by the simulator's
probe series (the same names, labels and meaning as the real probe; tests/real_vllm pins it)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from specdec_exporter.devtools.sim.probe import (
    ProbeSeries,
    engine_speculative_config,
    split_problems,
)
from specdec_exporter.devtools.sim.settings import SpeculativeConfig
from specdec_exporter.devtools.sim.telemetry import MultiprocessView
from variants import MODEL

SEQUENCES = (
    # temperature, acceptance histogram (steps that accepted j drafts), draft tokens
    (0.0, [1, 0, 0, 0, 9], 40),  # 10 steps, 36 accepted
    (0.0, [2, 1, 1, 0, 6], 40),  # 10 steps, 27 accepted
    (0.8, [5, 2, 2, 1, 0], 40),  # 10 steps, 9 accepted
)
STEPS = (
    # engine, running batch, drafts, draft tokens, accepted tokens
    (0, 1, 1, 4, 4),
    (0, 3, 3, 12, 6),
    (0, 40, 30, 120, 30),
)


def probe_text(
    *, rounds: int = 1, temperature_split: bool = True, multiprocess: bool = False
) -> str:
    """The probe's lines after ``rounds`` times SEQUENCES and STEPS."""
    registry = CollectorRegistry(auto_describe=False)
    series = ProbeSeries(
        registry,
        model=MODEL,
        vllm_version="0.33.0",
        problems=split_problems(True, temperature_split),
        engines=1,
        positions=4,
        speculative_config=engine_speculative_config(
            SpeculativeConfig(
                "draft_model", 4, draft_model="/models/draft", draft_tensor_parallel_size=1
            ),
            "summary" if temperature_split else "none",
        ),
    )
    for _ in range(rounds):
        for temperature, histogram, draft_tokens in SEQUENCES:
            series.record_sequence(
                temperature,
                histogram,
                draft_tokens,
                ttft=0.05,
                first_token_at=2.0,
                last_token_at=2.5,
                generated=3,
            )
        for engine, running, drafts, draft_tokens, accepted in STEPS:
            series.record_step(engine, running, drafts, draft_tokens, accepted)
    source = MultiprocessView(registry) if multiprocess else registry
    return generate_latest(source).decode()

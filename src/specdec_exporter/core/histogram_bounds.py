"""Bucket bounds of the per-request histograms, shared by the tap and the engine probe.

Standard library only (this module is copied into vLLM's process with the probe). The latency
bounds are vLLM's own defaults, so the histograms can be compared with vLLM's.
"""

from __future__ import annotations

ACCEPTANCE_RATE_BOUNDS: tuple[float, ...] = tuple(round(0.05 * step, 2) for step in range(1, 21))
"""0.05, 0.10, ..., 1.0: a sequence's draft acceptance rate (accepted / draft tokens)."""
TTFT_BOUNDS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
"""vLLM's own ``vllm:time_to_first_token_seconds`` buckets, so the two can be compared."""
TPOT_BOUNDS: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
"""vLLM's own TPOT (and inter-token latency) buckets (0.33)."""

"""Step-time model: one engine step's cost by batch size and drafted tokens.

Drafting is nearly free at small batches and costs target compute at large ones.
"""

from __future__ import annotations

from dataclasses import dataclass

MODEL_FREE_DRAFTERS = frozenset({"ngram", "ngram_gpu", "suffix"})
LIGHT_HEAD_DRAFTERS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})


@dataclass(frozen=True)
class StepTimeModel:
    """Milliseconds of modelled GPU time; the simulator divides them by ``--speed``."""

    base_ms: float = 1.5
    token_ms: float = 0.06
    prefill_token_ms: float = 0.004
    draft_pass_ms: float = 0.375
    draft_token_ms: float = 0.005

    def step_ms(
        self,
        *,
        prefill_tokens: int,
        decode_requests: int,
        draft_tokens: int,
        draft_passes: int,
        drafting_requests: int,
    ) -> float:
        """One step: prefill, verify 1 + drafts per decoding request, then the drafter's passes."""
        target = (
            self.base_ms
            + self.token_ms * (decode_requests + draft_tokens)
            + self.prefill_token_ms * prefill_tokens
        )
        drafter = draft_passes * (self.draft_pass_ms + self.draft_token_ms * drafting_requests)
        return target + drafter


def step_time_model_for(method: str | None) -> StepTimeModel:
    """Drafter cost by method: n-gram lookups are nearly free, heads are light, models are not."""
    if method is None or method in MODEL_FREE_DRAFTERS:
        return StepTimeModel(draft_pass_ms=0.02, draft_token_ms=0.0)
    if method in LIGHT_HEAD_DRAFTERS or method.endswith("_mtp"):
        return StepTimeModel(draft_pass_ms=0.15, draft_token_ms=0.002)
    return StepTimeModel()


def mean_acceptance_length(alpha: float, k: int) -> float:
    """Expected tokens per verify step at i.i.d. acceptance alpha: (1 - a^(k+1)) / (1 - a)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def modelled_speedup(model: StepTimeModel, *, batch_size: int, k: int, alpha: float) -> float:
    """Decode throughput with k drafts over throughput without, for a batch of decoding requests."""
    plain = model.step_ms(
        prefill_tokens=0,
        decode_requests=batch_size,
        draft_tokens=0,
        draft_passes=0,
        drafting_requests=0,
    )
    speculative = model.step_ms(
        prefill_tokens=0,
        decode_requests=batch_size,
        draft_tokens=batch_size * k,
        draft_passes=k,
        drafting_requests=batch_size,
    )
    return mean_acceptance_length(alpha, k) * plain / speculative

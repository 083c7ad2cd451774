"""Every vLLM metric name this project reads, and the spellings vLLM has used for them.

A rename upstream touches this module only. Names are kept in their canonical colon form;
``canonical_name`` maps the underscore spelling (``vllm_...``) back to it.
"""

from __future__ import annotations

PREFIX = "vllm:"
UNDERSCORE_PREFIX = "vllm_"

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
"""Gauge: requests in the running batch, per engine (calibrate reports it beside concurrency)."""

V1_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, ACCEPTED_PER_POSITION)

# Legacy V0 engine (vLLM < 0.10): cumulative-since-start gauges and inflated counters.
V0_ACCEPTANCE_RATE = "vllm:spec_decode_draft_acceptance_rate"
V0_EFFICIENCY = "vllm:spec_decode_efficiency"
V0_EMITTED_TOKENS = "vllm:spec_decode_num_emitted_tokens_total"
V0_GAUGES = (V0_ACCEPTANCE_RATE, V0_EFFICIENCY)

SPEC_DECODE_STEM = "spec_decode_"
"""Any family of vLLM's whose name contains this is a speculative-decoding family."""

WANTED_SAMPLES = frozenset((*V1_COUNTERS, GENERATION_TOKENS, *V0_GAUGES, V0_EMITTED_TOKENS))

LABEL_MODEL = "model_name"
LABEL_ENGINE = "engine"
LABEL_POSITION = "position"

DEFAULT_ENGINE = "0"
"""The engine label given to series that carry none (V0 servers, a single-engine front end)."""


def canonical_name(sample_name: str) -> str:
    """``vllm_spec_decode_x`` -> ``vllm:spec_decode_x``; other names unchanged."""
    if sample_name.startswith(UNDERSCORE_PREFIX):
        return PREFIX + sample_name[len(UNDERSCORE_PREFIX) :]
    return sample_name


# Per-request metrics in a response body (vLLM >= 0.29, --per-request-spec-decode-metrics): the
# response, or a stream's final usage chunk, carries {"metrics": {"speculative_decoding": {...}}}.
RESPONSE_METRICS = "metrics"
RESPONSE_SPEC_DECODING = "speculative_decoding"
RESPONSE_USAGE = "usage"
RESPONSE_COMPLETION_TOKENS = "completion_tokens"
REQUEST_SPEC_STEPS = "num_spec_steps"
REQUEST_DRAFT_TOKENS = "num_draft_tokens"
REQUEST_ACCEPTED_TOKENS = "num_accepted_draft_tokens"
REQUEST_SPEC_TOKENS = "num_spec_tokens"
REQUEST_MEAN_ACCEPTANCE_LENGTH = "mean_acceptance_length"
REQUEST_ACCEPTANCE_RATE = "draft_acceptance_rate"
REQUEST_ACCEPTANCE_HISTOGRAM = "acceptance_histogram"

"""Every name of the engine probe's families on vLLM's /metrics: written by the probe, read by the
sidecar. Standard library only (this module is copied into vLLM's process)."""

from __future__ import annotations

from typing import Final

PREFIX: Final = "specdec_probe_"

# Labels.
MODEL: Final = "model_name"
TEMPERATURE_BUCKET: Final = "temperature_bucket"
BATCH_BUCKET: Final = "batch_bucket"
ENGINE: Final = "engine"
POSITION: Final = "position"
"""The same label name as vLLM's per-position counter (core.parse reads both with one check)."""
HOOK: Final = "hook"
HOOK_RECORD: Final = "record"
"""The stat logger's ``record()``: one call per engine step (the batch split)."""
HOOK_FINISHED: Final = "finished"
"""The wrapped ``OutputProcessor._update_stats_from_finished``: one call per finished sequence."""
HOOKS: Final = (HOOK_RECORD, HOOK_FINISHED)
VERSION: Final = "version"
VLLM_VERSION: Final = "vllm_version"
TEMPERATURE_SPLIT: Final = "temperature_split"
BATCH_SPLIT: Final = "batch_split"
REASON: Final = "reason"
INFO_LABELS: Final = (VERSION, VLLM_VERSION, TEMPERATURE_SPLIT, BATCH_SPLIT, REASON)
"""The info series' labels: the probe's version, vLLM's, each split ``on``/``off``, and why."""
ON: Final = "on"
OFF: Final = "off"
REASON_LIMIT: Final = 300
"""Characters an info label keeps (the probe writes at most this much reason; the sidecar reads
at most this much of any label: a label value is bounded)."""
MAX_POSITIONS: Final = 65
"""Positions ``0..64`` are what the sidecar reads of a ``position`` label (``core.parse``): the
probe counts per position up to vLLM's k and refuses a k above this (its temperature split off)."""

# Per (model_name, temperature_bucket), one sample per finished sequence (a request with n = 2 is
# two). Counter names as prometheus_client takes them: the exposition adds ``_total``.
SEQUENCES: Final = "specdec_probe_sequences"
SPEC_SEQUENCES: Final = "specdec_probe_spec_sequences"
DRAFTS: Final = "specdec_probe_drafts"
DRAFT_TOKENS: Final = "specdec_probe_draft_tokens"
ACCEPTED_TOKENS: Final = "specdec_probe_accepted_tokens"
ACCEPTED_PER_POSITION: Final = "specdec_probe_accepted_tokens_per_position"
ACCEPTANCE_RATE: Final = "specdec_probe_acceptance_rate"
TTFT: Final = "specdec_probe_time_to_first_token_seconds"
TPOT: Final = "specdec_probe_time_per_output_token_seconds"

# Per (model_name, engine, batch_bucket), one sample per engine step with speculative figures.
BATCH_STEPS: Final = "specdec_probe_batch_steps"
BATCH_DRAFTS: Final = "specdec_probe_batch_drafts"
BATCH_DRAFT_TOKENS: Final = "specdec_probe_batch_draft_tokens"
BATCH_ACCEPTED_TOKENS: Final = "specdec_probe_batch_accepted_tokens"

# Health.
INFO: Final = "specdec_probe_info"
ERRORS: Final = "specdec_probe_errors"

# vLLM's own speculative configuration, as the probe read it from the ``vllm_config`` its stat
# logger receives: one series per process (gauge = 1, ``multiprocess_mode="max"``), every label
# bounded by ``REASON_LIMIT``; a field this vLLM does not have is "".
SPECULATIVE_CONFIG_INFO: Final = "specdec_probe_speculative_config_info"
SPECULATIVE: Final = "speculative"
"""``on``: vLLM runs with a ``--speculative-config``; ``off``: without (every other label "")."""
METHOD: Final = "method"
NUM_SPECULATIVE_TOKENS: Final = "num_speculative_tokens"
DRAFT_MODEL: Final = "draft_model"
DRAFT_TENSOR_PARALLEL_SIZE: Final = "draft_tensor_parallel_size"
NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE: Final = "num_speculative_tokens_per_batch_size"
"""vLLM's k schedule as compact JSON (``[[1,4,4],[5,64,2]]``), "" when none is set."""
PER_REQUEST_METRICS: Final = "per_request_metrics"
"""vLLM's ``--per-request-spec-decode-metrics``: ``none``, ``summary`` or ``detailed``."""
SPECULATIVE_CONFIG_LABELS: Final = (
    SPECULATIVE,
    METHOD,
    NUM_SPECULATIVE_TOKENS,
    DRAFT_MODEL,
    DRAFT_TENSOR_PARALLEL_SIZE,
    NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE,
    PER_REQUEST_METRICS,
)

"""vLLM 0.33's own /metrics families (names, types, HELP, labels, series, buckets), in one place.

Taken verbatim, in registration order, from tests/fixtures/vllm-0.33.0/spec_ngram_k4.t3.prom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specdec_exporter.core.histogram_bounds import TPOT_BOUNDS, TTFT_BOUNDS

FamilyKind = Literal["counter", "gauge", "histogram", "summary"]
Scope = Literal["vllm", "http"]

ONE_TWO_FIVE = (-1.0,)
"""Marker: buckets 1, 2, 5, 10, 20, 50, ... up to --max-model-len (vLLM's build_1_2_5_buckets)."""

SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
CACHE_CONFIG_INFO = "vllm:cache_config_info"
KV_CACHE_SIZE_TOKENS = 480000

CACHE_CONFIG_LABELS: dict[str, str] = {
    "_block_size_resolved": "True",
    "block_size": "16",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "effective_attention_block_size": "16",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "enable_prefix_caching": "True",
    "gpu_memory_utilization": "0.9",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "58.59",
    "kv_cache_memory_bytes": "None",
    "kv_cache_size_tokens": str(KV_CACHE_SIZE_TOKENS),
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto",
    "num_cpu_blocks": "None",
    "num_gpu_blocks": "30000",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "simple_cpu_offload_num_blocks": "None",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "True",
}
CACHE_CONFIG_HELP = "Information of the LLMEngine CacheConfig"


@dataclass(frozen=True)
class Family:
    """One metric family as vLLM registers it (labels beyond ``model_name`` and ``engine``)."""

    name: str
    kind: FamilyKind
    help: str
    labels: tuple[str, ...] = ()
    presets: tuple[tuple[str, ...], ...] = ()
    buckets: tuple[float, ...] = ()
    per_engine: bool = True
    scope: Scope = "vllm"
    spec: bool = False


def one_two_five_buckets(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... while <= max_value (vLLM's build_1_2_5_buckets)."""
    edges: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(edges)
            edges.append(float(value))
        exponent += 1


def bucket_edges(family: Family, max_model_len: int) -> tuple[float, ...]:
    if family.buckets == ONE_TWO_FIVE:
        return one_two_five_buckets(max_model_len)
    return family.buckets


FAMILIES: tuple[Family, ...] = (
    Family("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.", spec=True),
    Family("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", spec=True),
    Family(
        "vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.", spec=True
    ),
    Family(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "counter",
        "Accepted tokens per draft position.",
        labels=("position",),
        spec=True,
    ),
    Family(
        "vllm:estimated_flops_per_gpu",
        "counter",
        "Estimated number of floating point operations per GPU (for Model Flops "
        "Utilization calculations).",
    ),
    Family(
        "vllm:estimated_read_bytes_per_gpu",
        "counter",
        "Estimated number of bytes read from memory per GPU (for Model Flops "
        "Utilization calculations).",
    ),
    Family(
        "vllm:estimated_write_bytes_per_gpu",
        "counter",
        "Estimated number of bytes written to memory per GPU (for Model Flops "
        "Utilization calculations).",
    ),
    Family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
    Family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    Family(
        "vllm:num_requests_waiting_by_reason",
        "gauge",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
        "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
        "budget, KV transfer, blocked status). Sum of all reasons equals "
        "vllm:num_requests_waiting.",
        labels=("reason",),
        presets=(("capacity",), ("deferred",)),
    ),
    Family(
        "vllm:engine_sleep_state",
        "gauge",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
        "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
        "sleep level 2.",
        labels=("sleep_state",),
        presets=(("awake",), ("weights_offloaded",), ("discard_all",)),
    ),
    Family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    Family(
        "vllm:prefix_cache_queries",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    Family(
        "vllm:prefix_cache_hits",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
    ),
    Family(
        "vllm:external_prefix_cache_queries",
        "counter",
        "External prefix cache queries from KV connector cross-instance cache sharing, "
        "in terms of number of queried tokens.",
    ),
    Family(
        "vllm:external_prefix_cache_hits",
        "counter",
        "External prefix cache hits from KV connector cross-instance cache sharing, in "
        "terms of number of cached tokens.",
    ),
    Family(
        "vllm:mm_cache_queries",
        "counter",
        "Multi-modal cache queries, in terms of number of queried items.",
    ),
    Family(
        "vllm:mm_cache_hits",
        "counter",
        "Multi-modal cache hits, in terms of number of cached items.",
    ),
    Family("vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine."),
    Family("vllm:prompt_tokens", "counter", "Number of prefill tokens processed."),
    Family(
        "vllm:prompt_tokens_by_source",
        "counter",
        "Number of prompt tokens by source.",
        labels=("source",),
        presets=(("local_compute",), ("local_cache_hit",), ("external_kv_transfer",)),
    ),
    Family(
        "vllm:prompt_tokens_cached", "counter", "Number of cached prompt tokens (local + external)."
    ),
    Family(
        "vllm:prompt_tokens_cached_by_source",
        "counter",
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local "
        "HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM "
        "instance) or external_unspecified. Counted at admission; sums to "
        "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
        labels=("source",),
        presets=(("device",), ("host",), ("p2p",), ("disk",), ("external_unspecified",)),
    ),
    Family("vllm:generation_tokens", "counter", "Number of generation tokens processed."),
    Family(
        "vllm:request_success",
        "counter",
        "Count of successfully processed requests.",
        labels=("finished_reason",),
        presets=(("stop",), ("length",), ("abort",), ("error",), ("repetition",)),
    ),
    Family(
        "vllm:admission_rejections",
        "counter",
        "Number of admission attempts rejected by a queue limit, by reason.",
        labels=("reason",),
        presets=(("max_num_queued_reqs",), ("max_num_queued_tokens",)),
        per_engine=False,
    ),
    Family(
        "vllm:request_prompt_tokens",
        "histogram",
        "Number of prefill tokens processed.",
        buckets=ONE_TWO_FIVE,
    ),
    Family(
        "vllm:request_generation_tokens",
        "histogram",
        "Number of generation tokens processed.",
        buckets=ONE_TWO_FIVE,
    ),
    Family(
        "vllm:iteration_tokens_total",
        "histogram",
        "Histogram of number of tokens per engine_step.",
        buckets=(
            1.0,
            8.0,
            16.0,
            32.0,
            64.0,
            128.0,
            256.0,
            512.0,
            1024.0,
            2048.0,
            4096.0,
            8192.0,
            16384.0,
        ),
    ),
    Family(
        "vllm:request_max_num_generation_tokens",
        "histogram",
        "Histogram of maximum number of requested generation tokens.",
        buckets=ONE_TWO_FIVE,
    ),
    Family(
        "vllm:request_params_n",
        "histogram",
        "Histogram of the n request parameter.",
        buckets=(1.0, 2.0, 5.0, 10.0, 20.0),
    ),
    Family(
        "vllm:request_params_max_tokens",
        "histogram",
        "Histogram of the max_tokens request parameter.",
        buckets=ONE_TWO_FIVE,
    ),
    Family(
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
        buckets=TTFT_BOUNDS,
    ),
    Family(
        "vllm:inter_token_latency_seconds",
        "histogram",
        "Histogram of inter-token latency in seconds.",
        buckets=TPOT_BOUNDS,
    ),
    Family(
        "vllm:request_time_per_output_token_seconds",
        "histogram",
        "Histogram of time_per_output_token_seconds per request.",
        buckets=TPOT_BOUNDS,
    ),
    Family(
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "Histogram of e2e request latency in seconds.",
        buckets=(
            0.3,
            0.5,
            0.8,
            1.0,
            1.5,
            2.0,
            2.5,
            5.0,
            10.0,
            15.0,
            20.0,
            30.0,
            40.0,
            50.0,
            60.0,
            120.0,
            240.0,
            480.0,
            960.0,
            1920.0,
            7680.0,
        ),
    ),
    Family(
        "vllm:request_queue_time_seconds",
        "histogram",
        "Histogram of time spent in WAITING phase for request.",
        buckets=(
            0.3,
            0.5,
            0.8,
            1.0,
            1.5,
            2.0,
            2.5,
            5.0,
            10.0,
            15.0,
            20.0,
            30.0,
            40.0,
            50.0,
            60.0,
            120.0,
            240.0,
            480.0,
            960.0,
            1920.0,
            7680.0,
        ),
    ),
    Family(
        "vllm:request_inference_time_seconds",
        "histogram",
        "Histogram of time spent in RUNNING phase for request.",
        buckets=(
            0.3,
            0.5,
            0.8,
            1.0,
            1.5,
            2.0,
            2.5,
            5.0,
            10.0,
            15.0,
            20.0,
            30.0,
            40.0,
            50.0,
            60.0,
            120.0,
            240.0,
            480.0,
            960.0,
            1920.0,
            7680.0,
        ),
    ),
    Family(
        "vllm:request_prefill_time_seconds",
        "histogram",
        "Histogram of time spent in PREFILL phase for request.",
        buckets=(
            0.3,
            0.5,
            0.8,
            1.0,
            1.5,
            2.0,
            2.5,
            5.0,
            10.0,
            15.0,
            20.0,
            30.0,
            40.0,
            50.0,
            60.0,
            120.0,
            240.0,
            480.0,
            960.0,
            1920.0,
            7680.0,
        ),
    ),
    Family(
        "vllm:request_decode_time_seconds",
        "histogram",
        "Histogram of time spent in DECODE phase for request.",
        buckets=(
            0.3,
            0.5,
            0.8,
            1.0,
            1.5,
            2.0,
            2.5,
            5.0,
            10.0,
            15.0,
            20.0,
            30.0,
            40.0,
            50.0,
            60.0,
            120.0,
            240.0,
            480.0,
            960.0,
            1920.0,
            7680.0,
        ),
    ),
    Family(
        "vllm:request_num_preemptions",
        "histogram",
        "Histogram of the number of times a request was preempted.",
        buckets=(1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0),
    ),
    Family(
        "vllm:request_prefill_kv_computed_tokens",
        "histogram",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        buckets=ONE_TWO_FIVE,
    ),
    Family(
        "http_requests",
        "counter",
        "Total number of requests by method, status and handler.",
        labels=("handler", "method", "status"),
        scope="http",
    ),
    Family(
        "http_request_size_bytes",
        "summary",
        "Content length of incoming requests by handler. Only value of header is "
        "respected. Otherwise ignored. No percentile calculated. ",
        labels=("handler",),
        scope="http",
    ),
    Family(
        "http_response_size_bytes",
        "summary",
        "Content length of outgoing responses by handler. Only value of header is "
        "respected. Otherwise ignored. No percentile calculated. ",
        labels=("handler",),
        scope="http",
    ),
    Family(
        "http_request_duration_highr_seconds",
        "histogram",
        "Latency with many buckets but no API specific labels. Made for more accurate "
        "percentile calculations. ",
        buckets=(
            0.01,
            0.025,
            0.05,
            0.075,
            0.1,
            0.25,
            0.5,
            0.75,
            1.0,
            1.5,
            2.0,
            2.5,
            3.0,
            3.5,
            4.0,
            4.5,
            5.0,
            7.5,
            10.0,
            30.0,
            60.0,
        ),
        scope="http",
    ),
    Family(
        "http_request_duration_seconds",
        "histogram",
        "Latency with only few buckets by handler. Made to be only used if aggregation "
        "by handler is important. ",
        labels=("handler", "method"),
        buckets=(0.1, 0.5, 1.0),
        scope="http",
    ),
)
"""Every family in registration order, except vllm:cache_config_info (an info gauge, see above)."""

"""The simulator's configuration: one frozen SimConfig, and parsing of vLLM's speculative config."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from specdec_exporter.devtools.sim.steptime import StepTimeModel, step_time_model_for
from specdec_exporter.sidecar.config import ConfigError

VLLM_VERSION = "0.33.0"
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_DRAFTER_QUALITY = 0.85

MetricNames = Literal["colon", "underscore", "mixed"]
SpecMetricsMode = Literal["none", "summary", "detailed"]

MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
KNOWN_METHODS = frozenset(
    {"ngram", "ngram_gpu", "suffix", "draft_model", "eagle", "eagle3", "mtp", "dflash", "dspark",
     "custom_class"}
)
NGRAM_MISS_RATE = 0.15
"""Share of steps in which a model-free drafter finds no match and proposes nothing."""


@dataclass(frozen=True)
class KRange:
    """One entry of ``num_speculative_tokens_per_batch_size``: batch sizes lo..hi draft k tokens."""

    lo: int
    hi: int
    k: int


@dataclass(frozen=True)
class SpeculativeConfig:
    """What ``--speculative-config`` says: the method and how many tokens to draft."""

    method: str
    num_speculative_tokens: int
    per_batch_size: tuple[KRange, ...] = ()

    @property
    def model_free(self) -> bool:
        return self.method in MODEL_FREE_METHODS

    def k_for_batch(self, batch_size: int) -> int:
        """Tokens to draft per request at this batch size (the first matching range wins)."""
        for entry in self.per_batch_size:
            if entry.lo <= batch_size <= entry.hi:
                return entry.k
        return self.num_speculative_tokens


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulator can be told; the CLI flags map one to one onto these fields."""

    host: str = "127.0.0.1"
    port: int = 0
    served_model_name: str = DEFAULT_MODEL
    speculative: SpeculativeConfig | None = None
    per_request_spec_decode_metrics: SpecMetricsMode = "none"
    enable_per_request_metrics: bool = False
    enable_force_include_usage: bool = False
    data_parallel_size: int = 1
    api_server_count: int | None = None
    default_temperature: float = 1.0
    seed: int = 0
    drafter_quality: float = DEFAULT_DRAFTER_QUALITY
    draft_miss_rate: float | None = None
    metric_names: MetricNames = "colon"
    speed: float = 1.0
    max_num_seqs: int = 256
    max_model_len: int = 8192
    mean_output_tokens: int = 200
    merge_chunks: bool = True
    step_time: StepTimeModel | None = None
    modelled_clock: bool = False
    """Request timestamps (per-request timing metrics, latency histograms) count modelled step
    time, not wall time: server-side figures that the host's load cannot skew."""

    def __post_init__(self) -> None:
        check_sim_config(self)

    @property
    def effective_api_server_count(self) -> int:
        """vLLM defaults the API server count to the data-parallel size."""
        return self.api_server_count or self.data_parallel_size

    @property
    def multiprocess_metrics(self) -> bool:
        return self.effective_api_server_count > 1

    @property
    def k_max(self) -> int:
        return 0 if self.speculative is None else self.speculative.num_speculative_tokens

    @property
    def effective_draft_miss_rate(self) -> float:
        if self.draft_miss_rate is not None:
            return self.draft_miss_rate
        if self.speculative is not None and self.speculative.model_free:
            return NGRAM_MISS_RATE
        return 0.0

    @property
    def effective_step_time(self) -> StepTimeModel:
        if self.step_time is not None:
            return self.step_time
        return step_time_model_for(None if self.speculative is None else self.speculative.method)

    def with_port(self, port: int) -> SimConfig:
        return replace(self, port=port)


def check_sim_config(config: SimConfig) -> None:
    """Raise ConfigError (one readable line) for values vLLM or the simulator would reject."""
    checks: list[tuple[bool, str]] = [
        (0 <= config.port <= 65535, f"--port out of range: {config.port}"),
        (bool(config.served_model_name), "--served-model-name must not be empty"),
        (config.data_parallel_size >= 1, "--data-parallel-size must be at least 1"),
        (config.api_server_count is None or config.api_server_count >= 1,
         "--api-server-count must be at least 1"),
        (0.0 <= config.default_temperature <= 2.0, "--default-temperature must be in [0, 2]"),
        (0.0 <= config.drafter_quality <= 1.0, "--drafter-quality must be in [0, 1]"),
        (config.draft_miss_rate is None or 0.0 <= config.draft_miss_rate <= 1.0,
         "--draft-miss-rate must be in [0, 1]"),
        (math.isfinite(config.speed) and config.speed > 0, "--speed must be positive"),
        (config.max_num_seqs >= 1, "--max-num-seqs must be at least 1"),
        (config.max_model_len >= 16, "--max-model-len must be at least 16"),
        (config.mean_output_tokens >= 1, "--mean-output-tokens must be at least 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def parse_speculative_config(text: str | None) -> SpeculativeConfig | None:
    """Parse ``--speculative-config`` JSON the way vLLM reads the parts the simulator uses."""
    if text is None or not text.strip():
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--speculative-config is not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise ConfigError("--speculative-config must be a JSON object")
    method = _method_of(raw)
    schedule = _parse_schedule(raw.get("num_speculative_tokens_per_batch_size"))
    k = raw.get("num_speculative_tokens")
    if k is None and schedule:
        k = max(entry.k for entry in schedule)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError("--speculative-config needs num_speculative_tokens >= 1")
    if any(entry.k > k for entry in schedule):
        raise ConfigError("num_speculative_tokens_per_batch_size: K above num_speculative_tokens")
    return SpeculativeConfig(method=method, num_speculative_tokens=k, per_batch_size=schedule)


def _method_of(raw: dict[str, Any]) -> str:
    method = raw.get("method")
    if method is None:
        if "model" not in raw:
            raise ConfigError("--speculative-config needs a method (ngram, eagle3, ...)")
        return "draft_model"
    if not isinstance(method, str):
        raise ConfigError("--speculative-config method must be a string")
    if method == "medusa":
        raise ConfigError("speculative method 'medusa' is no longer supported by vLLM")
    if method not in KNOWN_METHODS and not method.endswith("_mtp"):
        raise ConfigError(f"unknown speculative method {method!r}")
    return method


def _parse_schedule(raw: Any) -> tuple[KRange, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("num_speculative_tokens_per_batch_size must be a list of [lo, hi, K]")
    entries = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
            raise ConfigError(f"num_speculative_tokens_per_batch_size: bad entry {item!r}")
        lo, hi, k = item
        if lo < 1 or hi < lo or k < 0:
            raise ConfigError(f"num_speculative_tokens_per_batch_size: bad range {item!r}")
        entries.append(KRange(lo=lo, hi=hi, k=k))
    return tuple(entries)


def parse_default_temperature(
    explicit: float | None, override_json: str | None, generation_config_json: str | None
) -> float:
    """Resolve the default temperature like vLLM: override, then generation_config.json, then 1.0.

    ``explicit`` (the simulator's ``--default-temperature``) wins over both.
    """
    if explicit is not None:
        return explicit
    for source, text in (("--override-generation-config", override_json),
                         ("generation_config.json", generation_config_json)):
        if text is None:
            continue
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source} is not valid JSON: {exc.msg}") from None
        if isinstance(values, dict) and isinstance(values.get("temperature"), int | float):
            return float(values["temperature"])
    return 1.0

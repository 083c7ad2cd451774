"""The simulator's configuration: one frozen pydantic SimConfig, and vLLM's speculative config."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic_settings import CliToggleFlag

from specdec_exporter.core.model import DRAFT_COST_RATIO_BY_METHOD
from specdec_exporter.devtools.sim.steptime import StepTimeModel, step_time_model_for
from specdec_exporter.options import MAX_TEMPERATURE, ConfigError, Seed, flag_of

VLLM_VERSION = "0.33.0"
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_DRAFTER_QUALITY = 0.85

MetricNames = Literal["colon", "underscore", "mixed"]
SpecMetricsMode = Literal["none", "summary", "detailed"]

MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
KNOWN_METHODS = frozenset({*DRAFT_COST_RATIO_BY_METHOD, "custom_class"})
"""The methods the simulator accepts: the ones the speedup model has a cost for (core/model.py,
the one list of them) and vLLM's ``custom_class``."""
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
    draft_model: str | None = None
    """``model`` as vLLM keeps it: the draft model, or the method's name for ngram and suffix."""
    draft_tensor_parallel_size: int | None = None
    """As vLLM resolves it: the target's (1 here) for a drafter with a model, unset without."""

    @property
    def model_free(self) -> bool:
        return self.method in MODEL_FREE_METHODS

    def k_for_batch(self, batch_size: int) -> int:
        """Tokens to draft per request at this batch size (the first matching range wins)."""
        for entry in self.per_batch_size:
            if entry.lo <= batch_size <= entry.hi:
                return entry.k
        return self.num_speculative_tokens


MAX_SPECULATIVE_TOKENS = 128
"""The most tokens a person would draft per step (vLLM's methods use 1 to about 10)."""
Port = Annotated[int, Field(ge=0, le=65535)]
Temperature = Annotated[float, Field(ge=0.0, le=MAX_TEMPERATURE)]


class ServeOptions(BaseModel):
    """What `vllm serve`'s own flags set; `simulate` takes them under the same names."""

    host: str = Field(
        default="127.0.0.1",
        description="address to bind (vLLM's default is all interfaces; the simulator's is "
        "loopback)",
    )
    port: Port = Field(default=0, description="port; 0 lets the OS choose")
    served_model_name: str = Field(
        default=DEFAULT_MODEL,
        min_length=1,
        description="model_name label, /v1/models, accepted model",
    )
    per_request_spec_decode_metrics: SpecMetricsMode = Field(
        default="none", description="per-request speculative decoding metrics in each response"
    )
    enable_per_request_metrics: bool = Field(
        default=False, description="also return timing metrics per request"
    )
    enable_force_include_usage: bool = Field(
        default=False,
        description="the usage chunk (and so the per-request metrics) on every stream",
    )
    data_parallel_size: int = Field(default=1, ge=1, le=64, description="engines, engine=0..N-1")
    api_server_count: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="> 1 renders /metrics multiprocess-style; unset: the DP size",
    )
    max_num_seqs: int = Field(
        default=256, ge=1, le=65_536, description="running batch limit per engine"
    )
    max_model_len: int = Field(
        default=8192, ge=16, le=10_000_000, description="prompt + max_tokens limit"
    )


class SimulatorOptions(BaseModel):
    """The simulator's own knobs; `simulate` takes them as flags of the same names."""

    seed: Seed = Field(
        default=0, description="same seed and same requests: same outputs and counts"
    )
    drafter_quality: float = Field(
        default=DEFAULT_DRAFTER_QUALITY,
        ge=0.0,
        le=1.0,
        description="drafter knob in 0..1, about the greedy acceptance rate",
    )
    draft_miss_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=f"share of steps with no draft; unset: {NGRAM_MISS_RATE} for "
        f"{'/'.join(sorted(MODEL_FREE_METHODS))}, else 0",
    )
    metric_names: MetricNames = Field(
        default="colon",
        description="vllm: names, vllm_ names, or vllm_ samples under vllm: TYPE lines",
    )
    speed: float = Field(
        default=1.0,
        ge=0.01,
        le=1000,
        description="time-scale factor: 10 runs engine steps ten times faster",
    )
    mean_output_tokens: int = Field(
        default=200,
        ge=1,
        le=1_000_000,
        description="mean length at which a response stops by itself",
    )
    chunk_merging: CliToggleFlag[bool] = Field(
        default=True,
        description="like vLLM, merge the engine steps a slow client has not read into one SSE "
        "chunk; --no-chunk-merging keeps one chunk per step",
    )
    probe: bool = Field(
        default=False,
        description="serve the engine probe's specdec_probe_* families on /metrics, as vLLM does "
        "with the probe on its PYTHONPATH",
    )
    modelled_clock: bool = Field(
        default=False,
        description="request timestamps (per-request timings, latency histograms) count "
        "modelled step time, not wall time: figures the host's load cannot skew",
    )


class SimConfig(ServeOptions, SimulatorOptions):
    """Everything the simulator can be told: what `vllm serve`'s flags set, the simulator's own
    knobs, and what only Python sets.

    Each default and each range is written here once; a bad value raises ConfigError naming the
    flag, in one line.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    speculative: SpeculativeConfig | None = None
    default_temperature: Temperature = Field(
        default=1.0, description="temperature of a request without one"
    )
    step_time: StepTimeModel | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _one_line_errors(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError as exc:
            raise ConfigError(describe_errors(exc)) from None

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
        return self.model_copy(update={"port": port})


def default_of(field: str) -> Any:
    """A SimConfig field's default, for the CLI's help texts and flags."""
    return SimConfig.model_fields[field].default


def describe_errors(exc: ValidationError) -> str:
    """Pydantic's errors as one line, each led by the flag it concerns."""
    parts = []
    for error in exc.errors(include_url=False):
        field = str(error["loc"][0]) if error["loc"] else ""
        where = flag_of(SimConfig, field) if field in SimConfig.model_fields else field or "config"
        parts.append(f"{where}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(parts)


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
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        raise ConfigError(
            f"--speculative-config needs num_speculative_tokens 1 to {MAX_SPECULATIVE_TOKENS}"
        )
    if any(entry.k > k for entry in schedule):
        raise ConfigError("num_speculative_tokens_per_batch_size: K above num_speculative_tokens")
    draft_model, draft_tp = _drafter_of(raw, method)
    return SpeculativeConfig(
        method=method,
        num_speculative_tokens=k,
        per_batch_size=schedule,
        draft_model=draft_model,
        draft_tensor_parallel_size=draft_tp,
    )


def _drafter_of(raw: dict[str, Any], method: str) -> tuple[str | None, int | None]:
    """``model`` and ``draft_tensor_parallel_size`` as vLLM 0.32 resolves them: a model-free
    method's name stands for its model and it has no draft TP; a drafter with a model runs at the
    target's TP (1 in the simulator) unless given."""
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError("--speculative-config model must be a string")
    tp = raw.get("draft_tensor_parallel_size")
    if tp is not None and (not isinstance(tp, int) or isinstance(tp, bool) or tp < 1):
        raise ConfigError("--speculative-config draft_tensor_parallel_size must be >= 1")
    if method in MODEL_FREE_METHODS:
        return model or method, tp
    return model, 1 if tp is None else tp


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
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        ):
            raise ConfigError(f"num_speculative_tokens_per_batch_size: bad entry {item!r}")
        lo, hi, k = item
        if lo < 1 or hi < lo or k < 0:
            raise ConfigError(f"num_speculative_tokens_per_batch_size: bad range {item!r}")
        entries.append(KRange(lo=lo, hi=hi, k=k))
    return tuple(entries)


def parse_default_temperature(
    explicit: float | None, override_json: str | None, generation_config_json: str | None
) -> float:
    """Resolve the default temperature like vLLM: override, then generation_config.json, then
    SimConfig's default (1.0).

    ``explicit`` (the simulator's ``--default-temperature``) wins over both.
    """
    if explicit is not None:
        return explicit
    for source, text in (
        ("--override-generation-config", override_json),
        ("generation_config.json", generation_config_json),
    ):
        if text is None:
            continue
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source} is not valid JSON: {exc.msg}") from None
        if isinstance(values, dict) and isinstance(values.get("temperature"), int | float):
            return float(values["temperature"])
    return float(default_of("default_temperature"))

"""What a sweep runs: the temperature list, the traffic of each phase, where counters live.

The fields `sweep` takes as flags are SweepOptions; SweepConfig adds what only Python sets.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from specdec_exporter.devtools.load.config import (
    ClientOptions,
    Count,
    LoadConfig,
    RequestContent,
)
from specdec_exporter.devtools.load.counters import CounterWatch
from specdec_exporter.devtools.load.mix import MixEntry, parse_temperatures
from specdec_exporter.options import DEFAULT_MAX_BODY_BYTES, HttpUrl, Metavar

Source = Literal["per-request", "counters"]
SourceChoice = Literal["auto", "per-request", "counters"]

DEFAULT_TEMPERATURES_TEXT = "0,0.4,0.8,1.0"
METRICS_PATH = "/metrics"


class SweepOptions(ClientOptions):
    """The sweep's fields that `sweep` takes as flags of the same names."""

    metrics_url: Annotated[HttpUrl | None, Metavar("URL")] = Field(
        default=None, description="base URL whose /metrics has vLLM's counters; unset: --url"
    )
    requests: Count = Field(default=20, description="requests per temperature")
    concurrency: Count = Field(default=4, description="requests in flight at once")
    stream: bool = Field(
        default=False, description="stream every request (with include_usage); needed for TTFT/TPOT"
    )
    source: SourceChoice = Field(
        default="auto",
        description="where acceptance comes from; auto: per-request if every successful "
        "request of the first phase carried metrics, else counters",
    )


class SweepConfig(SweepOptions, RequestContent, CounterWatch):
    """Everything a sweep needs; one load phase per temperature, run one after another."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperatures: tuple[float | None, ...] = Field(
        default=parse_temperatures(DEFAULT_TEMPERATURES_TEXT), min_length=1
    )
    seed: int = 0
    """Every phase uses this seed, so every temperature gets the same prompts in the same order."""
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)

    @property
    def metrics_base_url(self) -> str:
        """Where ``/metrics`` is fetched from (a trailing ``/metrics`` in the flag is accepted)."""
        if self.metrics_url is None:
            return self.url
        return self.metrics_url.rstrip("/").removesuffix(METRICS_PATH)

    @property
    def total_requests(self) -> int:
        return self.requests * len(self.temperatures)

    def phase_load(self, temperature: float | None, model: str | None) -> LoadConfig:
        """The load generator's config of one phase: every request at ``temperature``."""
        return LoadConfig(
            url=self.url,
            model=model,
            concurrency=self.concurrency,
            requests=self.requests,
            mix=(MixEntry(temperature, 1.0),),
            stream_share=1.0 if self.stream else 0.0,
            include_usage=True,
            max_tokens=self.max_tokens,
            timeout=self.timeout,
            endpoint="chat",
            prompts=self.prompts,
            seed=self.seed,
            api_key=self.api_key,
            **self.vllm_trust(),
        )

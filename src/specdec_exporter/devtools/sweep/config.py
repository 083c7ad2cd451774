"""What a sweep runs: the temperature list, the traffic of each phase, where counters live."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from specdec_exporter.devtools.load.config import BUILTIN_PROMPTS, LoadConfig
from specdec_exporter.devtools.load.mix import DEFAULT_TOKEN, MixEntry, temperature_label

Source = Literal["per-request", "counters"]
SourceChoice = Literal["auto", "per-request", "counters"]
SOURCE_CHOICES: tuple[SourceChoice, ...] = ("auto", "per-request", "counters")

DEFAULT_TEMPERATURES_TEXT = "0,0.4,0.8,1.0"
METRICS_PATH = "/metrics"


class TemperatureListError(ValueError):
    """The ``--temperatures`` text is invalid; the message says which part and why."""


def parse_temperatures(text: str) -> tuple[float | None, ...]:
    """``0,0.4,0.8,1.0`` -> (0.0, 0.4, 0.8, 1.0), in the order given.

    Each entry is a number >= 0 or ``default`` (None: the ``temperature`` key is omitted, so
    the server's default applies). Duplicates and weights (``0.7:2``) are rejected.
    """
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise TemperatureListError(f"empty entry in temperature list {text!r}")
    temperatures = tuple(_parse_one(part) for part in parts)
    labels = [temperature_label(temperature) for temperature in temperatures]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise TemperatureListError(f"temperature {duplicates[0]} given twice in {text!r}")
    return temperatures


def _parse_one(part: str) -> float | None:
    if part.lower() == DEFAULT_TOKEN:
        return None
    try:
        value = float(part)
    except ValueError:
        raise TemperatureListError(f"temperature is not a number: {part!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TemperatureListError(f"temperature must be a finite number >= 0, got {part!r}")
    return value


def base_url(url: str) -> str:
    """The server root: a trailing ``/`` or ``/v1`` is dropped (as the load generator does)."""
    return url.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep needs; one load phase per temperature, run one after another."""

    url: str = "http://127.0.0.1:8000"
    metrics_url: str | None = None
    """Base URL whose ``/metrics`` holds vLLM's counters; None: the same as ``url``."""
    model: str | None = None
    temperatures: tuple[float | None, ...] = parse_temperatures(DEFAULT_TEMPERATURES_TEXT)
    requests: int = 20
    """Requests per temperature."""
    concurrency: int = 4
    max_tokens: int = 64
    stream: bool = False
    prompts: tuple[str, ...] = BUILTIN_PROMPTS
    seed: int = 0
    """Every phase uses this seed, so every temperature gets the same prompts in the same order."""
    api_key: str | None = field(default=None, repr=False)
    source: SourceChoice = "auto"
    settle_timeout: float = 10.0
    """Seconds to wait, after a phase, for vLLM's counters to take in its last requests."""
    settle_interval: float = 0.05
    """Seconds between the scrapes that watch the counters settle."""
    scrape_timeout: float = 10.0
    max_body_bytes: int = 16 * 1024 * 1024
    request_timeout: float = 600.0

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ValueError("at least one temperature is needed")
        if self.requests < 1 or self.concurrency < 1 or self.max_tokens < 1:
            raise ValueError("requests, concurrency and max_tokens must be >= 1")
        if not self.prompts:
            raise ValueError("at least one prompt is needed")
        if self.source not in SOURCE_CHOICES:
            raise ValueError(f"source must be one of {', '.join(SOURCE_CHOICES)}")
        if self.settle_timeout < 0 or self.settle_interval <= 0:
            raise ValueError("settle_timeout must be >= 0 and settle_interval > 0")

    @property
    def metrics_base_url(self) -> str:
        """Where ``/metrics`` is fetched from (a trailing ``/metrics`` in the flag is accepted)."""
        if self.metrics_url is None:
            return base_url(self.url)
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
            endpoint="chat",
            prompts=self.prompts,
            seed=self.seed,
            api_key=self.api_key,
            timeout=self.request_timeout,
        )

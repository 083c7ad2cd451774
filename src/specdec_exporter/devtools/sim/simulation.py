"""The simulated server's state: engines, drafter, metrics generation, ground truth, restarts."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdec_exporter.devtools.sim.acceptance import AcceptanceModel
from specdec_exporter.devtools.sim.engine import ApiRequest, Engine, EngineRequest, natural_length
from specdec_exporter.devtools.sim.settings import VLLM_VERSION, SimConfig
from specdec_exporter.devtools.sim.telemetry import Telemetry
from specdec_exporter.devtools.sim.truth import GroundTruth


@dataclass(frozen=True)
class GenerationSpec:
    """A validated request with its effective values (defaults already resolved)."""

    id_prefix: str
    prompt_tokens: tuple[int, ...]
    n: int
    max_tokens: tuple[int, ...]
    temperature: float
    ignore_eos: bool


def system_fingerprint(config: SimConfig) -> str:
    """``vllm-<version>-<hash8>`` like vLLM's --fingerprint-mode hash."""
    digest = hashlib.sha256(f"{config.served_model_name}/{config.seed}".encode()).hexdigest()
    return f"vllm-{VLLM_VERSION}-{digest[:8]}"


class Simulation:
    """Everything the HTTP layer talks to; lives on one event loop."""

    def __init__(
        self,
        config: SimConfig,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.clock = clock
        self.wall = wall
        self.acceptance = AcceptanceModel()
        self.quality = config.drafter_quality
        self.miss_rate = config.effective_draft_miss_rate
        self.step_time = config.effective_step_time
        self.fingerprint = system_fingerprint(config)
        self.restarts = 0
        self.started_at = wall()
        self.telemetry = Telemetry(config, self.started_at)
        self.truth = GroundTruth(config.data_parallel_size, config.k_max, self.started_at)
        self.engines = [Engine(index, self, clock) for index in range(config.data_parallel_size)]
        self._tasks: list[asyncio.Task[None]] = []
        self._ordinal = 0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(engine.run()) for engine in self.engines]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def restart(self) -> None:
        """As a vLLM restart: in-flight requests die, every counter starts again at 0."""
        for engine in self.engines:
            for request in engine.drop_all():
                request.sink.abort("restart")
        self.restarts += 1
        self.started_at = self.wall()
        self.telemetry = Telemetry(self.config, self.started_at)
        self.truth = GroundTruth(self.config.data_parallel_size, self.config.k_max, self.started_at)

    def set_drafter(self, quality: float | None, miss_rate: float | None) -> None:
        if quality is not None:
            self.quality = quality
        if miss_rate is not None:
            self.miss_rate = miss_rate

    def submit(self, spec: GenerationSpec) -> ApiRequest:
        """Create the request's sequences and queue them on the least-loaded engine."""
        ordinal = self._ordinal
        self._ordinal += 1
        seed = f"{self.config.seed}/{ordinal}"
        request_id = f"{spec.id_prefix}-{random.Random(f'{seed}/id').getrandbits(64):016x}"
        api = ApiRequest(ordinal, request_id, int(self.wall()), spec.n)
        engine = min(self.engines, key=lambda e: (e.load, e.index))
        arrival = engine.clock()
        detailed = self.config.per_request_spec_decode_metrics == "detailed"
        for prompt_index, (prompt_tokens, max_tokens) in enumerate(
            zip(spec.prompt_tokens, spec.max_tokens, strict=True)
        ):
            for sample in range(spec.n):
                choice = prompt_index * spec.n + sample
                choice_seed = f"{seed}/{choice}"
                natural = (
                    float("inf")
                    if spec.ignore_eos
                    else natural_length(
                        random.Random(f"{choice_seed}/length"), self.config.mean_output_tokens
                    )
                )
                api.add_choice(
                    EngineRequest(
                        api,
                        choice,
                        prompt_tokens=prompt_tokens,
                        max_tokens=max_tokens,
                        natural_tokens=natural,
                        temperature=spec.temperature,
                        seed=choice_seed,
                        k_max=self.config.k_max,
                        detailed=detailed,
                        arrival=arrival,
                    )
                )
        engine.submit(list(api.choices))
        self.truth.api_requests += 1
        return api

    def loads(self) -> list[tuple[int, int]]:
        return [(len(engine.running), len(engine.waiting)) for engine in self.engines]

    def ground_truth(self) -> dict[str, Any]:
        spec = self.config.speculative
        extra = {
            "model": self.config.served_model_name,
            "restarts": self.restarts,
            "speculative_method": None if spec is None else spec.method,
            "num_speculative_tokens": self.config.k_max,
            "drafter_quality": self.quality,
            "draft_miss_rate": self.miss_rate,
        }
        return self.truth.as_json(self.loads(), extra)

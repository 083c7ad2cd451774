"""Continuous-batching engine loop: one asyncio task per data-parallel engine.

Counters, ground truth and per-request statistics move from the same step events.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from specdec_exporter.devtools.sim import text
from specdec_exporter.devtools.sim.acceptance import AcceptanceModel, sample_accepted
from specdec_exporter.devtools.sim.families import KV_CACHE_SIZE_TOKENS
from specdec_exporter.devtools.sim.settings import SimConfig
from specdec_exporter.devtools.sim.steptime import StepTimeModel
from specdec_exporter.devtools.sim.telemetry import Finished, Telemetry
from specdec_exporter.devtools.sim.truth import GroundTruth, SpecCounts, temperature_key


class EngineHost(Protocol):
    """What an engine reads of the simulation that owns it (``simulation.Simulation``)."""

    config: SimConfig
    acceptance: AcceptanceModel
    quality: float
    miss_rate: float
    step_time: StepTimeModel
    telemetry: Telemetry
    truth: GroundTruth


CONTEXTS_PER_REQUEST = 16
SHORT_DRAFT_RATE = 0.1
"""Share of n-gram proposals that are shorter than k (the match runs out)."""
CATCH_UP_LIMIT = 0.05
AbortReason = Literal["client", "restart"]


@dataclass(eq=False)
class StepOutput:
    """What one engine step produced for one choice (merged when a client falls behind)."""

    choice: int
    text: str
    tokens: int
    finish_reason: str | None


@dataclass(eq=False)
class RequestSpecCounts:
    """Per-request speculative-decoding statistics, as vLLM returns them per request."""

    k_max: int
    detailed: bool
    num_spec_steps: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    histogram: list[int] = field(default_factory=list)
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.histogram = [0] * (self.k_max + 1)

    def add(self, drafted: int, accepted: int) -> None:
        self.num_spec_steps += 1
        self.num_draft_tokens += drafted
        self.num_accepted += accepted
        self.histogram[accepted] += 1
        if self.detailed:
            self.per_step_accepted.append(accepted)
            self.per_step_drafted.append(drafted)

    def counts(self) -> SpecCounts:
        return SpecCounts(
            drafts=self.num_spec_steps,
            draft_tokens=self.num_draft_tokens,
            accepted_tokens=self.num_accepted,
        )


class ApiRequest:
    """One HTTP request: its n (x prompts) engine requests deliver into one queue."""

    def __init__(self, ordinal: int, request_id: str, created: int, n: int) -> None:
        self.ordinal = ordinal
        self.request_id = request_id
        self.created = created
        self.n = n
        self.choices: list[EngineRequest] = []
        self.queue: asyncio.Queue[StepOutput | None] = asyncio.Queue()
        self.finished = asyncio.Event()
        self.abort_reason: AbortReason | None = None
        self._remaining = 0

    def add_choice(self, choice: EngineRequest) -> None:
        self.choices.append(choice)
        self._remaining += 1

    def deliver(self, output: StepOutput) -> None:
        self.queue.put_nowait(output)
        if output.finish_reason is not None:
            self._remaining -= 1
            if self._remaining == 0:
                self.finished.set()

    def abort(self, reason: AbortReason) -> None:
        if self.abort_reason is None and not self.finished.is_set():
            self.abort_reason = reason
            self.queue.put_nowait(None)
            self.finished.set()


class EngineRequest:
    """One sequence in the engine (vLLM fans a request with n > 1 out into n of these)."""

    def __init__(
        self,
        sink: ApiRequest,
        choice: int,
        *,
        prompt_tokens: int,
        max_tokens: int,
        natural_tokens: float,
        temperature: float,
        seed: str,
        k_max: int,
        detailed: bool,
        arrival: float,
    ) -> None:
        self.sink = sink
        self.choice = choice
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.natural_tokens = natural_tokens
        self.limit = int(min(max_tokens, natural_tokens))
        self.temperature = temperature
        self.temperature_key = temperature_key(temperature)
        self.text_rng = random.Random(f"{seed}/text")
        self.spec_rng = random.Random(f"{seed}/spec")
        self.contexts = [
            int(self.spec_rng.random() * 1_000_000) for _ in range(CONTEXTS_PER_REQUEST)
        ]
        self.stats = RequestSpecCounts(k_max=k_max, detailed=detailed)
        self.arrival = arrival
        self.scheduled_at: float | None = None
        self.first_token_at: float | None = None
        self.last_token_at = arrival
        self.finished_at: float | None = None
        self.finish_reason: str | None = None
        self.generated = 0
        self.dropped = False
        self._alphas: tuple[float, list[float]] | None = None

    def alphas(self, sim: EngineHost) -> list[float]:
        """Acceptance of this request's contexts at its temperature and the current quality."""
        quality = sim.quality
        if self._alphas is None or self._alphas[0] != quality:
            count = sim.acceptance.context_count
            values = sim.acceptance.acceptances(
                self.temperature, quality, [c % count for c in self.contexts]
            )
            self._alphas = (quality, values)
        return self._alphas[1]

    @property
    def active(self) -> bool:
        return not self.dropped and self.sink.abort_reason is None


def natural_length(rng: random.Random, mean: int) -> int:
    """Where the model would emit EOS by itself: geometric-like around ``mean`` tokens."""
    return max(1, math.ceil(rng.expovariate(1.0 / mean)))


class Engine:
    """One data-parallel rank: a waiting queue, a running batch and its step loop."""

    def __init__(
        self, index: int, sim: EngineHost, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.index = index
        self.sim = sim
        self.modelled_seconds = 0.0
        """Modelled GPU time of every step so far (the step-time model, before ``--speed``)."""
        self.clock = self._modelled_now if sim.config.modelled_clock else clock
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self._wakeup = asyncio.Event()

    def _modelled_now(self) -> float:
        return self.modelled_seconds

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    def submit(self, requests: list[EngineRequest]) -> None:
        self.waiting.extend(requests)
        self._wakeup.set()

    def drop_all(self) -> list[EngineRequest]:
        """Forget every request (a restart): they count nowhere afterwards."""
        dropped = [*self.running, *self.waiting]
        for request in dropped:
            request.dropped = True
        self.running.clear()
        self.waiting.clear()
        return dropped

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            if not self.running and not self.waiting:
                self._publish_load()
                self._wakeup.clear()
                await self._wakeup.wait()
                due = loop.time()
                continue
            prefill, decode = self._schedule()
            # Sleep to a deadline, not for a duration: the loop's timers have millisecond
            # granularity, and deadlines keep the mean step time right across steps. Lateness
            # beyond CATCH_UP_LIMIT (an idle engine, a busy CPU) is forgiven, not made up.
            due = max(due, loop.time() - CATCH_UP_LIMIT) + self._timed_step(prefill, decode)
            await asyncio.sleep(max(0.0, due - loop.time()))
            self._execute(prefill, decode)

    def _schedule(self) -> tuple[list[EngineRequest], list[tuple[EngineRequest, int]]]:
        now = self.clock()
        decode = [request for request in self.running if not request.dropped]
        prefill: list[EngineRequest] = []
        while self.waiting and len(self.running) < self.sim.config.max_num_seqs:
            request = self.waiting.popleft()
            request.scheduled_at = now
            self.running.append(request)
            prefill.append(request)
        spec = self.sim.config.speculative
        k = 0 if spec is None else spec.k_for_batch(len(self.running))
        return prefill, [
            (request, self._draft_length(request, k) if request.active else 0) for request in decode
        ]

    def _draft_length(self, request: EngineRequest, k: int) -> int:
        if k == 0:
            return 0
        rng = request.spec_rng
        if rng.random() < self.sim.miss_rate:
            return 0
        spec = self.sim.config.speculative
        if spec is not None and spec.model_free and k > 1 and rng.random() < SHORT_DRAFT_RATE:
            return 1 + int(rng.random() * (k - 1))
        return k

    def _timed_step(
        self, prefill: list[EngineRequest], decode: list[tuple[EngineRequest, int]]
    ) -> float:
        """The step's wall seconds; its modelled time goes to the clock and the ground truth."""
        drafted = [count for _, count in decode if count]
        prefill_tokens = sum(request.prompt_tokens for request in prefill)
        milliseconds = self.sim.step_time.step_ms(
            prefill_tokens=prefill_tokens,
            decode_requests=len(decode),
            draft_tokens=sum(drafted),
            draft_passes=max(drafted, default=0),
            drafting_requests=len(drafted),
        )
        if decode:
            plain = self.sim.step_time.step_ms(
                prefill_tokens=prefill_tokens,
                decode_requests=len(decode),
                draft_tokens=0,
                draft_passes=0,
                drafting_requests=0,
            )
            self.sim.truth.record_decode_step(self.index, milliseconds, plain)
        self.modelled_seconds += milliseconds / 1000.0
        return milliseconds / 1000.0 / self.sim.config.speed

    def _execute(
        self, prefill: list[EngineRequest], decode: list[tuple[EngineRequest, int]]
    ) -> None:
        step = StepAccumulator(self.sim.config.k_max, self.clock())
        for request in prefill:
            self._prefill(request, step)
        for request, drafted in decode:
            self._decode(request, drafted, step)
        if step.iteration_tokens:  # nothing to record when a restart dropped the whole batch
            self.sim.telemetry.engines[self.index].record_step(
                step.drafts,
                step.draft_tokens,
                step.accepted_per_pos,
                step.generated,
                step.iteration_tokens,
            )
        if step.finished:
            self.running = [r for r in self.running if r.finish_reason is None and not r.dropped]
        probe = self.sim.telemetry.probe
        if probe is not None and step.drafts:  # vLLM's running count after the finished left
            accepted = sum(step.accepted_per_pos)
            probe.record_step(
                self.index, len(self.running), step.drafts, step.draft_tokens, accepted
            )
        self._publish_load()

    def _prefill(self, request: EngineRequest, step: StepAccumulator) -> None:
        if request.dropped:
            return
        if not request.active:
            self._finish(request, "abort", step)
            return
        self.sim.telemetry.engines[self.index].record_prefill(request.prompt_tokens)
        self.sim.truth.record_prefill(self.index, request.prompt_tokens)
        step.iteration_tokens += request.prompt_tokens
        request.first_token_at = step.now
        self.sim.telemetry.engines[self.index].ttft.observe(step.now - request.arrival)
        self._emit(request, 1, step)

    def _decode(self, request: EngineRequest, drafted: int, step: StepAccumulator) -> None:
        if request.dropped:
            return
        if not request.active:
            self._finish(request, "abort", step)
            return
        accepted = 0
        if drafted:
            accepted = sample_accepted(request.alphas(self.sim), drafted, request.spec_rng)
            step.add_draft(drafted, accepted)
            request.stats.add(drafted, accepted)
            self.sim.truth.record_draft(self.index, request.temperature_key, drafted, accepted)
        self.sim.telemetry.engines[self.index].itl.observe(step.now - request.last_token_at)
        step.iteration_tokens += 1 + drafted
        self._emit(request, accepted + 1, step)

    def _emit(self, request: EngineRequest, tokens: int, step: StepAccumulator) -> None:
        """Tokens beyond the request's limit are cut here; the spec counters keep them (as vLLM)."""
        count = min(tokens, request.limit - request.generated)
        words = text.generate(request.text_rng, count, first=request.generated == 0)
        request.generated += count
        request.last_token_at = step.now
        step.generated += count
        self.sim.truth.record_tokens(self.index, request.temperature_key, count)
        reason = None
        if request.generated >= request.limit:
            reason = "stop" if request.natural_tokens <= request.max_tokens else "length"
            self._finish(request, reason, step)
        request.sink.deliver(StepOutput(request.choice, words, count, reason))

    def _finish(self, request: EngineRequest, reason: str, step: StepAccumulator) -> None:
        now = step.now
        scheduled = request.scheduled_at if request.scheduled_at is not None else now
        first = request.first_token_at if request.first_token_at is not None else now
        request.finish_reason = reason
        request.finished_at = now
        step.finished = True
        self.sim.telemetry.engines[self.index].record_finish(
            Finished(
                reason=reason,
                prompt_tokens=request.prompt_tokens,
                generation_tokens=request.generated,
                max_tokens=request.max_tokens,
                n=request.sink.n,
                queue=scheduled - request.arrival,
                prefill=first - scheduled,
                decode=now - first,
                inference=now - scheduled,
                e2e=now - request.arrival,
            )
        )
        self.sim.truth.record_finish(self.index, request.temperature_key, reason)
        probe = self.sim.telemetry.probe
        if probe is not None and request.active:  # a client's abort never reaches the probe
            probe.record_sequence(
                request.temperature,
                request.stats.histogram,
                request.stats.num_draft_tokens,
                ttft=first - request.arrival,
                first_token_at=first,
                last_token_at=now,
                generated=request.generated,
            )

    def _publish_load(self) -> None:
        in_cache = sum(r.prompt_tokens + r.generated for r in self.running)
        self.sim.telemetry.engines[self.index].set_load(
            len(self.running), len(self.waiting), in_cache / KV_CACHE_SIZE_TOKENS
        )


@dataclass
class StepAccumulator:
    """Totals of one engine step, written to the counters once per step."""

    k_max: int
    now: float
    drafts: int = 0
    draft_tokens: int = 0
    generated: int = 0
    iteration_tokens: int = 0
    finished: bool = False
    accepted_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.accepted_per_pos = [0] * self.k_max

    def add_draft(self, drafted: int, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += drafted
        for position in range(accepted):
            self.accepted_per_pos[position] += 1

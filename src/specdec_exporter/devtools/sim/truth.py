"""Ground truth: exact cumulative counts since the last restart, by engine and by temperature."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def temperature_key(temperature: float) -> str:
    """The effective temperature as ground truth keys it: Python's float repr ("0.7", "1.0")."""
    return repr(float(temperature))


@dataclass
class SpecCounts:
    """Drafts (verify steps that drafted), drafted and accepted tokens."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    def add(self, drafted: int, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += drafted
        self.accepted_tokens += accepted

    def add_counts(self, other: SpecCounts) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted_tokens += other.accepted_tokens

    def as_json(self) -> dict[str, int]:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
        }


@dataclass
class EngineTruth:
    """What one engine did; equals its /metrics counters once no step is in flight."""

    k_max: int
    spec: SpecCounts = field(default_factory=SpecCounts)
    accepted_per_position: list[int] = field(default_factory=list)
    generation_tokens: int = 0
    prompt_tokens: int = 0
    requests: int = 0
    finished_reasons: dict[str, int] = field(default_factory=dict)
    decode_steps: int = 0
    decode_step_ms: float = 0.0
    """Modelled milliseconds of the steps that decoded (step-time model, before ``--speed``)."""
    decode_step_plain_ms: float = 0.0
    """The same steps without their drafts: what plain decoding would have cost."""

    def __post_init__(self) -> None:
        self.accepted_per_position = [0] * self.k_max

    def add_draft(self, drafted: int, accepted: int) -> None:
        self.spec.add(drafted, accepted)
        for position in range(accepted):
            self.accepted_per_position[position] += 1

    def as_json(self) -> dict[str, Any]:
        return {
            **self.spec.as_json(),
            "accepted_per_position": list(self.accepted_per_position),
            "generation_tokens": self.generation_tokens,
            "prompt_tokens": self.prompt_tokens,
            "requests": self.requests,
            "finished_reasons": dict(self.finished_reasons),
            "decode_steps": self.decode_steps,
            "decode_step_ms": self.decode_step_ms,
            "decode_step_plain_ms": self.decode_step_plain_ms,
        }


@dataclass
class TemperatureTruth:
    requests: int = 0
    spec: SpecCounts = field(default_factory=SpecCounts)
    generation_tokens: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            **self.spec.as_json(),
            "generation_tokens": self.generation_tokens,
        }


@dataclass
class Attribution:
    """Engine requests whose per-request metrics reached the client, and their spec counts."""

    requests: int = 0
    spec: SpecCounts = field(default_factory=SpecCounts)

    def as_json(self) -> dict[str, int]:
        return {"requests": self.requests, **self.spec.as_json()}


class GroundTruth:
    """Accumulates the same engine events that move the counters, plus what the counters lack."""

    def __init__(self, engines: int, k_max: int, started_at: float) -> None:
        self.started_at = started_at
        self.k_max = k_max
        self.engines = [EngineTruth(k_max) for _ in range(engines)]
        self.by_temperature: dict[str, TemperatureTruth] = {}
        self.attributed = Attribution()
        self.unattributed = Attribution()
        self.api_requests = 0

    def _temperature(self, key: str) -> TemperatureTruth:
        entry = self.by_temperature.get(key)
        if entry is None:
            entry = self.by_temperature[key] = TemperatureTruth()
        return entry

    def record_draft(self, engine: int, key: str, drafted: int, accepted: int) -> None:
        self.engines[engine].add_draft(drafted, accepted)
        self._temperature(key).spec.add(drafted, accepted)

    def record_tokens(self, engine: int, key: str, generated: int) -> None:
        self.engines[engine].generation_tokens += generated
        self._temperature(key).generation_tokens += generated

    def record_decode_step(self, engine: int, milliseconds: float, plain_ms: float) -> None:
        truth = self.engines[engine]
        truth.decode_steps += 1
        truth.decode_step_ms += milliseconds
        truth.decode_step_plain_ms += plain_ms

    def record_prefill(self, engine: int, prompt_tokens: int) -> None:
        self.engines[engine].prompt_tokens += prompt_tokens

    def record_finish(self, engine: int, key: str, reason: str) -> None:
        truth = self.engines[engine]
        truth.requests += 1
        truth.finished_reasons[reason] = truth.finished_reasons.get(reason, 0) + 1
        self._temperature(key).requests += 1

    def record_attribution(self, attributed: bool, counts: SpecCounts) -> None:
        target = self.attributed if attributed else self.unattributed
        target.requests += 1
        target.spec.add_counts(counts)

    def total(self) -> EngineTruth:
        total = EngineTruth(self.k_max)
        for engine in self.engines:
            total.spec.add_counts(engine.spec)
            total.accepted_per_position = [
                a + b
                for a, b in zip(
                    total.accepted_per_position, engine.accepted_per_position, strict=True
                )
            ]
            total.generation_tokens += engine.generation_tokens
            total.prompt_tokens += engine.prompt_tokens
            total.requests += engine.requests
            total.decode_steps += engine.decode_steps
            total.decode_step_ms += engine.decode_step_ms
            total.decode_step_plain_ms += engine.decode_step_plain_ms
            for reason, count in engine.finished_reasons.items():
                total.finished_reasons[reason] = total.finished_reasons.get(reason, 0) + count
        return total

    def as_json(self, loads: Sequence[tuple[int, int]], extra: dict[str, Any]) -> dict[str, Any]:
        """The /sim/ground-truth document; ``loads`` is (running, waiting) per engine."""
        engines = {}
        for index, (engine, (running, waiting)) in enumerate(zip(self.engines, loads, strict=True)):
            engines[str(index)] = {**engine.as_json(), "running": running, "waiting": waiting}
        total = self.total().as_json()
        total["running"] = sum(running for running, _ in loads)
        total["waiting"] = sum(waiting for _, waiting in loads)
        return {
            **extra,
            "since": self.started_at,
            "api_requests": self.api_requests,
            "engines": engines,
            "total": total,
            "by_temperature": {
                key: entry.as_json() for key, entry in sorted(self.by_temperature.items())
            },
            "per_request_metrics": {
                "attributed": self.attributed.as_json(),
                "unattributed": self.unattributed.as_json(),
            },
        }

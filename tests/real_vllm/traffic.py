"""Known traffic against a vLLM server, and the counters it should move.

Sends chat requests, sums their per-request `metrics.speculative_decoding`, reads `/metrics`
counters and waits until they settle (they move a moment after a response completes).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from specdec_exporter.devtools.load.sse import SseDecoder

MODEL = "tiny-llama"
NUM_SPEC_TOKENS = 4
PROMPTS = (
    "def main():",
    "import os\nimport sys\n",
    "class Foo:",
    "for i in range(10):",
    "Hello, how are you?",
    "return self.",
    "# Copyright (c) Python Software Foundation",
    "if __name__ == '__main__':",
    "with open(path) as f:",
    "raise ValueError(",
)
SETTLE_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Labels = tuple[tuple[str, str], ...]


def samples(text: str, names: Sequence[str]) -> dict[tuple[str, Labels], float]:
    """The samples of the named series (exact sample names), keyed by name and sorted labels."""
    wanted = set(names)
    found: dict[tuple[str, Labels], float] = {}
    for line in text.splitlines():
        if not line.startswith(tuple(wanted)):
            continue
        match = _SAMPLE.match(line)
        if match and match["name"] in wanted:
            labels = tuple(sorted(_LABEL.findall(match["labels"] or "")))
            found[(match["name"], labels)] = float(match["value"])
    return found


@dataclass(frozen=True)
class Counts:
    """Speculative-decoding counts: a `/metrics` reading, a delta, or a sum of per-request ones."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = (0,) * NUM_SPEC_TOKENS

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.drafts - other.drafts,
            self.draft_tokens - other.draft_tokens,
            self.accepted_tokens - other.accepted_tokens,
            tuple(
                a - b
                for a, b in zip(
                    self.accepted_per_position, other.accepted_per_position, strict=True
                )
            ),
        )

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            tuple(
                a + b
                for a, b in zip(
                    self.accepted_per_position, other.accepted_per_position, strict=True
                )
            ),
        )

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.accepted_tokens / self.drafts


@dataclass(frozen=True)
class Reading:
    """The counters of one `/metrics` scrape, summed over engines."""

    spec: Counts
    generation_tokens: int
    requests_finished: int


SPEC_FAMILIES = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "per_position": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
}
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUESTS_FINISHED = "vllm:request_success_total"


def reading(text: str) -> Reading:
    found = samples(text, [*SPEC_FAMILIES.values(), GENERATION_TOKENS, REQUESTS_FINISHED])

    def total(name: str) -> int:
        return round(sum(value for (sample, _), value in found.items() if sample == name))

    per_position = [0] * NUM_SPEC_TOKENS
    for (sample, labels), value in found.items():
        if sample == SPEC_FAMILIES["per_position"]:
            per_position[int(dict(labels)["position"])] += round(value)
    spec = Counts(
        total(SPEC_FAMILIES["drafts"]),
        total(SPEC_FAMILIES["draft_tokens"]),
        total(SPEC_FAMILIES["accepted_tokens"]),
        tuple(per_position),
    )
    return Reading(spec, total(GENERATION_TOKENS), total(REQUESTS_FINISHED))


def settled_reading(
    client: httpx.Client, finished_at_least: int, timeout_s: float = SETTLE_TIMEOUT_S
) -> Reading:
    """Poll `/metrics` until `finished_at_least` requests are counted and two readings agree."""
    deadline = time.monotonic() + timeout_s
    previous: Reading | None = None
    while True:
        current = reading(client.get("/metrics").text)
        if current == previous and current.requests_finished >= finished_at_least:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(
                f"/metrics did not settle within {timeout_s} s: last {current}, "
                f"expected {finished_at_least} finished requests"
            )
        previous = current
        time.sleep(POLL_INTERVAL_S)


@dataclass(frozen=True)
class Request:
    """One chat request of a phase."""

    temperature: float
    stream: bool = False
    seed: int = 0
    max_tokens: int = 48

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            "messages": [{"role": "user", "content": PROMPTS[self.seed % len(PROMPTS)]}],
        }
        if self.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        return body


@dataclass(frozen=True)
class Outcome:
    """What one request reported about itself."""

    request: Request
    completion_tokens: int
    spec: Counts
    histogram: tuple[int, ...]


def spec_counts(metrics: dict[str, Any]) -> tuple[Counts, tuple[int, ...]]:
    """Per-request `speculative_decoding` -> counts (position p accepted = steps accepting > p)."""
    histogram = tuple(metrics["acceptance_histogram"])
    per_position = tuple(sum(histogram[p + 1 :]) for p in range(NUM_SPEC_TOKENS))
    counts = Counts(
        metrics["num_spec_steps"],
        metrics["num_draft_tokens"],
        metrics["num_accepted_draft_tokens"],
        per_position,
    )
    return counts, histogram


def chat(client: httpx.Client, request: Request) -> Outcome:
    if request.stream:
        final = stream_chunks(client, request.body())[-1]
    else:
        response = client.post("/v1/chat/completions", json=request.body())
        response.raise_for_status()
        final = response.json()
    counts, histogram = spec_counts(final["metrics"]["speculative_decoding"])
    return Outcome(request, final["usage"]["completion_tokens"], counts, histogram)


def stream_chunks(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(event) for event in stream_events(client, body) if event != "[DONE]"]


def stream_events(client: httpx.Client, body: dict[str, Any]) -> Iterator[str]:
    """The data of each SSE event of a streamed chat completion, in order."""
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        decoder = SseDecoder()
        for chunk in response.iter_bytes():
            yield from (event.decode() for event in decoder.feed(chunk))
        yield from (event.decode() for event in decoder.close())


def stream_raw(
    client: httpx.Client, body: dict[str, Any], path: str = "/v1/chat/completions"
) -> bytes:
    with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        return b"".join(response.iter_raw())


@dataclass
class Phase:
    """A batch of requests, the per-request sums and the `/metrics` delta they caused."""

    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    before: Reading | None = None
    after: Reading | None = None

    @property
    def per_request_sum(self) -> Counts:
        total = Counts()
        for outcome in self.outcomes:
            total += outcome.spec
        return total

    @property
    def counter_delta(self) -> Counts:
        assert self.before is not None and self.after is not None
        return self.after.spec - self.before.spec

    @property
    def completion_tokens(self) -> int:
        return sum(outcome.completion_tokens for outcome in self.outcomes)


def run_phase(
    client: httpx.Client, name: str, requests: Sequence[Request], concurrency: int = 1
) -> Phase:
    """Send the requests (in order, or `concurrency` at a time) between two settled readings."""
    phase = Phase(name)
    phase.before = settled_reading(client, 0)
    if concurrency == 1:
        phase.outcomes = [chat(client, request) for request in requests]
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            phase.outcomes = list(pool.map(lambda request: chat(client, request), requests))
    phase.after = settled_reading(client, phase.before.requests_finished + len(requests))
    return phase


def temperature_requests(temperature: float, count: int, first_seed: int = 0) -> list[Request]:
    """`count` requests at one temperature, alternating non-streaming and streaming."""
    return [
        Request(temperature, stream=index % 2 == 1, seed=first_seed + index)
        for index in range(count)
    ]

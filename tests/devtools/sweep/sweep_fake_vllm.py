"""A fake vLLM for the sweep: chat completions with per-request spec metrics, and a /metrics
whose counters advance exactly by what its responses report (optionally a few scrapes late).

Request counts are planned per temperature and arrival: the n-th request at temperature T drafts
``STEPS * K`` tokens in ``STEPS`` steps and has ``base(T) + OFFSETS[n % 5]`` of them accepted.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

MODEL = "fake-llama"
K = 4
STEPS = 10
DRAFTED = STEPS * K
BASE_ACCEPTED = {0.0: 32, 0.4: 28, 0.8: 20, 1.0: 12}
"""Mean accepted tokens of 40 drafted per temperature: rates 0.8, 0.7, 0.5, 0.3."""
DEFAULT_BASE_ACCEPTED = 24
OFFSETS = (0, -2, 2, -4, 4)
CREATED = 1795321607.6567323

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Counts:
    steps: int
    drafted: int
    accepted: int

    @property
    def output_tokens(self) -> int:
        return self.steps + self.accepted  # each verify step emits accepted + 1 tokens

    def accepted_per_step(self) -> list[int]:
        """As many full steps (K accepted) as fit, one partial step, the rest accept nothing."""
        full, partial = divmod(self.accepted, K)
        steps = [K] * full + ([partial] if partial else [])
        return steps + [0] * (self.steps - len(steps))

    def histogram(self) -> list[int]:
        per_step = self.accepted_per_step()
        return [per_step.count(j) for j in range(K + 1)]

    def per_position(self) -> list[int]:
        per_step = self.accepted_per_step()
        return [sum(1 for accepted in per_step if accepted > i) for i in range(K)]

    def as_metrics(self) -> dict[str, Any]:
        return {
            "mean_acceptance_length": 1 + self.accepted / self.steps if self.steps else 1.0,
            "draft_acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "acceptance_histogram": self.histogram(),
            "num_spec_steps": self.steps,
            "num_accepted_draft_tokens": self.accepted,
            "num_draft_tokens": self.drafted,
            "num_spec_tokens": K,
            "per_step_accepted": None,
            "per_step_drafted": None,
        }


def planned_counts(temperature: float | None, nth: int) -> Counts:
    base = DEFAULT_BASE_ACCEPTED if temperature is None else BASE_ACCEPTED[temperature]
    return Counts(STEPS, DRAFTED, base + OFFSETS[nth % len(OFFSETS)])


@dataclass
class EngineTotals:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=lambda: [0] * K)
    generation: int = 0

    def add(self, counts: Counts) -> None:
        self.drafts += counts.steps
        self.draft_tokens += counts.drafted
        self.accepted += counts.accepted
        self.per_position = [
            a + b for a, b in zip(self.per_position, counts.per_position(), strict=True)
        ]
        self.generation += counts.output_tokens


@dataclass
class Served:
    temperature: float | None
    prompt: str
    authorization: str | None
    counts: Counts


@dataclass
class FakeSpecVllm:
    """ASGI app. ``lag_scrapes``: a request's counts appear in /metrics only from the
    (lag + 1)-th scrape after it completed. ``drop_metrics_every`` n: every n-th response
    (1st, n+1-th, ...) omits its per-request metrics. Temperatures in ``fail_at`` get HTTP 500."""

    per_request_metrics: bool = True
    lag_scrapes: int = 0
    engines: int = 1
    spec_enabled: bool = True
    drop_metrics_every: int = 0
    fail_at: set[float] = field(default_factory=set)
    metrics_status: int = 200
    served: list[Served] = field(default_factory=list)
    scrapes: int = 0
    totals: list[EngineTotals] = field(default_factory=list)
    pending: list[tuple[int, int, Counts]] = field(default_factory=list)
    arrivals: dict[float | None, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.totals = [EngineTotals() for _ in range(self.engines)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/metrics":
            await self.metrics_app(scope, receive, send)
        else:
            await self.api_app(scope, receive, send)

    async def api_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The OpenAI routes only (like the sidecar's tap: no /metrics there)."""
        if scope["method"] == "GET" and scope["path"] == "/v1/models":
            await send_json(send, 200, {"object": "list", "data": [{"id": MODEL}]})
        elif scope["method"] == "POST" and scope["path"] == "/v1/chat/completions":
            await self._chat(scope, json.loads(await read_body(receive)), send)
        else:
            await send_json(send, 404, {"detail": "Not Found"})

    async def metrics_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """/metrics only: publish the counts old enough, then render the exposition."""
        if scope["path"] != "/metrics":
            await send_json(send, 404, {"detail": "Not Found"})
            return
        self.scrapes += 1
        self._publish()
        body = self.exposition().encode() if self.metrics_status == 200 else b"oops"
        await send_bytes(send, self.metrics_status, body, "text/plain; version=1.0.0")

    def _publish(self) -> None:
        waiting = []
        for age, engine, counts in self.pending:
            if age + 1 > self.lag_scrapes:
                self.totals[engine].add(counts)
            else:
                waiting.append((age + 1, engine, counts))
        self.pending = waiting

    async def _chat(self, scope: Scope, body: dict[str, Any], send: Send) -> None:
        temperature = body.get("temperature")
        if temperature in self.fail_at:
            await send_json(send, 500, {"error": {"message": "engine failed", "code": 500}})
            return
        nth = self.arrivals.get(temperature, 0)
        self.arrivals[temperature] = nth + 1
        counts = planned_counts(temperature, nth)
        headers = {key.decode(): value.decode() for key, value in scope["headers"]}
        prompt = body["messages"][0]["content"]
        self.served.append(Served(temperature, prompt, headers.get("authorization"), counts))
        with_metrics = self.per_request_metrics and not (
            self.drop_metrics_every and (len(self.served) - 1) % self.drop_metrics_every == 0
        )
        metrics = {"speculative_decoding": counts.as_metrics()} if with_metrics else None
        # Counted before the last byte leaves, like the simulator; lag_scrapes delays /metrics.
        self.pending.append((0, (len(self.served) - 1) % self.engines, counts))
        if body.get("stream"):
            await self._stream(body, counts, metrics, send)
        else:
            await send_json(send, 200, completion(counts, metrics))

    async def _stream(
        self, body: dict[str, Any], counts: Counts, metrics: dict[str, Any] | None, send: Send
    ) -> None:
        include_usage = body.get("stream_options", {}).get("include_usage", False)
        await send_start(send, 200, "text/event-stream")
        for chunk in stream_chunks(counts, metrics if include_usage else None, include_usage):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def exposition(self) -> str:
        """vLLM 0.33's text format: ``_total`` counters and ``_created`` gauges per engine."""
        lines: list[str] = []
        for name, help_text, samples in self.families():
            for suffix, kind in (("_total", "counter"), ("_created", "gauge")):
                lines += [f"# HELP {name}{suffix} {help_text}", f"# TYPE {name}{suffix} {kind}"]
                for engine, extra, value in samples:
                    shown = float(value) if kind == "counter" else CREATED
                    lines.append(
                        f'{name}{suffix}{{engine="{engine}",model_name="{MODEL}"{extra}}} {shown!r}'
                    )
        return "\n".join(lines) + "\n"

    def families(self) -> list[tuple[str, str, list[tuple[int, str, int]]]]:
        """(name, HELP, [(engine, extra labels, value)]) of each family the fake exposes."""
        engines = list(enumerate(self.totals))
        generation = (
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            [(e, "", t.generation) for e, t in engines],
        )
        if not self.spec_enabled:
            return [generation]
        return [
            (
                "vllm:spec_decode_num_drafts",
                "Number of spec decoding drafts.",
                [(e, "", t.drafts) for e, t in engines],
            ),
            (
                "vllm:spec_decode_num_draft_tokens",
                "Number of draft tokens.",
                [(e, "", t.draft_tokens) for e, t in engines],
            ),
            (
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                [(e, "", t.accepted) for e, t in engines],
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [
                    (e, f',position="{i}"', v)
                    for e, t in engines
                    for i, v in enumerate(t.per_position)
                ],
            ),
            generation,
        ]


def completion(counts: Counts, metrics: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok " * STEPS},
                "finish_reason": "length",
            }
        ],
        "usage": {
            "prompt_tokens": 5,
            "total_tokens": 5 + counts.output_tokens,
            "completion_tokens": counts.output_tokens,
        },
        "metrics": metrics,
    }


def stream_chunks(
    counts: Counts, metrics: dict[str, Any] | None, include_usage: bool
) -> list[bytes]:
    """Role chunk, one content chunk per step, the finish chunk, the usage chunk, [DONE]."""

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        chunk = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    events = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}}])]
    events += [
        event([{"index": 0, "delta": {"content": "ok "}, "finish_reason": None}])
        for _ in range(counts.steps)
    ]
    events.append(event([{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]))
    if include_usage:
        usage = {
            "prompt_tokens": 5,
            "total_tokens": 5 + counts.output_tokens,
            "completion_tokens": counts.output_tokens,
        }
        extra = {"usage": usage} | ({"metrics": metrics} if metrics else {})
        events.append(event([], **extra))
    return [*events, b"data: [DONE]\n\n"]


async def read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def send_start(send: Send, status: int, content_type: str, length: int | None = None) -> None:
    headers = [(b"content-type", content_type.encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def send_bytes(send: Send, status: int, body: bytes, content_type: str) -> None:
    await send_start(send, status, content_type, length=len(body))
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, document: Any) -> None:
    await send_bytes(send, status, json.dumps(document).encode(), "application/json")


App = Callable[[Scope, Receive, Send], Awaitable[None]]


@contextmanager
def serve_in_thread(app: App) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a port the OS picks) in a thread; yield its URL.

    The socket listens before the thread starts, so clients can connect at once.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        interface="asgi3",
        log_level="critical",
        access_log=False,
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

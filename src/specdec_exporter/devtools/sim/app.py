"""The simulator's ASGI app: vLLM's routes (/v1/*, /metrics, /health) plus /sim/* control.

It only moves bytes: protocol validates, the engines generate, responses shapes the output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from specdec_exporter.devtools.sim import faults, protocol, responses
from specdec_exporter.devtools.sim.engine import ApiRequest, StepOutput
from specdec_exporter.devtools.sim.settings import VLLM_VERSION
from specdec_exporter.devtools.sim.simulation import Simulation
from specdec_exporter.devtools.sim.telemetry import CONTENT_TYPE
from specdec_exporter.devtools.sim.truth import GroundTruth

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_TYPE = b"application/json"
SSE_TYPE = b"text/event-stream; charset=utf-8"
INSTRUMENTED = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/models"})


class Listener(Protocol):
    """The server side the app can ask to stop accepting connections for a while."""

    async def refuse_for(self, seconds: float) -> None: ...


@dataclass
class HttpRequest:
    scope: Scope
    body: bytes
    receive: Receive

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.scope.get("headers", []):
            if key.lower() == name:
                return bytes(value)
        return None


Handler = Callable[[HttpRequest, Send], Awaitable[None]]


VARY = (b"vary", b"Origin")
"""vLLM's CORS middleware adds it to every answer."""


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes | None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Starlette's header order (length, type), then what the middleware adds."""
    headers = [
        (b"content-length", str(len(body)).encode()),
        *([] if content_type is None else [(b"content-type", content_type)]),
        *(extra or []),
        VARY,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(
    send: Send, status: int, value: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_bytes(send, status, responses.dumps(value).encode(), JSON_TYPE, extra)


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def watch_disconnect(receive: Receive, api: ApiRequest) -> None:
    """vLLM aborts a request whose client went away; so does the simulator."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            api.abort("client")
            return


class SimApp:
    """ASGI application around one Simulation."""

    def __init__(
        self,
        sim: Simulation,
        listener: Listener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sim = sim
        self.listener = listener
        self.clock = clock
        self.fault = faults.Fault()
        self.closing = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self.routes: dict[tuple[str, str], Handler] = {
            ("GET", "/metrics"): self.metrics,
            ("GET", "/health"): self.health,
            ("GET", "/ping"): self.health,
            ("POST", "/ping"): self.health,
            ("GET", "/version"): self.version,
            ("GET", "/v1/models"): self.models,
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("POST", "/v1/completions"): self.completions,
            ("GET", "/sim/ground-truth"): self.ground_truth,
            ("GET", "/sim/drafter"): self.get_drafter,
            ("POST", "/sim/drafter"): self.set_drafter,
            ("POST", "/sim/restart"): self.restart,
            ("GET", "/sim/fault"): self.get_fault,
            ("POST", "/sim/fault"): self.set_fault,
            ("GET", "/sim/config"): self.config,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.sim.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.begin_shutdown()
                for task in list(self._background):
                    task.cancel()
                await self.sim.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def begin_shutdown(self) -> None:
        """End slow responses and in-flight generations so the server can stop promptly."""
        self.closing.set()
        for engine in self.sim.engines:
            for request in engine.drop_all():
                request.sink.abort("restart")

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        handler = self.routes.get((method, path))
        if handler is None:
            allowed = sorted(m for m, p in self.routes if p == path)
            if allowed:
                await send_json(
                    send,
                    405,
                    {"detail": "Method Not Allowed"},
                    [(b"allow", ", ".join(allowed).encode())],
                )
            else:
                await send_json(send, 404, {"detail": "Not Found"})
            return
        request = HttpRequest(scope, await read_body(receive), receive)
        if path not in INSTRUMENTED:
            await handler(request, send)
            return
        await self._instrumented(handler, request, send, path, method)

    async def _instrumented(
        self, handler: Handler, request: HttpRequest, send: Send, path: str, method: str
    ) -> None:
        """prometheus-fastapi-instrumentator's view of the request (vLLM mounts it)."""
        started = self.clock()
        seen = {"status": 500, "length": 0}

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                for key, value in message.get("headers", []):
                    if key == b"content-length":
                        seen["length"] = int(value)
            await send(message)

        telemetry = self.sim.telemetry
        await handler(request, watching_send)
        request_size = int(request.header(b"content-length") or 0)
        telemetry.http.record(
            path,
            method,
            status=seen["status"],
            request_bytes=request_size,
            response_bytes=seen["length"],
            seconds=self.clock() - started,
        )

    # vLLM's plain endpoints

    async def health(self, request: HttpRequest, send: Send) -> None:
        """vLLM answers a bare ``Response(status_code=200)``: no content type."""
        await send_bytes(send, 200, b"", None)

    async def version(self, request: HttpRequest, send: Send) -> None:
        await send_json(send, 200, {"version": VLLM_VERSION})

    async def models(self, request: HttpRequest, send: Send) -> None:
        model, created = self.sim.config.served_model_name, int(self.sim.started_at)
        await send_json(
            send,
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": model,
                        "object": "model",
                        "created": created,
                        "owned_by": "vllm",
                        "root": model,
                        "parent": None,
                        "max_model_len": self.sim.config.max_model_len,
                        "permission": [
                            {
                                "id": f"modelperm-{self.sim.fingerprint[-8:]}",
                                "object": "model_permission",
                                "created": created,
                                "allow_create_engine": False,
                                "allow_sampling": True,
                                "allow_logprobs": True,
                                "allow_search_indices": False,
                                "allow_view": True,
                                "allow_fine_tuning": False,
                                "organization": "*",
                                "group": None,
                                "is_blocking": False,
                            }
                        ],
                    }
                ],
            },
        )

    async def metrics(self, request: HttpRequest, send: Send) -> None:
        fault = self.fault if self.fault.active(self.clock()) else faults.Fault()
        if fault.kind == "slow":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closing.wait(), fault.delay)
        if fault.kind == "500":
            await send_bytes(send, 500, faults.ERROR_BODY, b"text/plain; charset=utf-8")
        elif fault.kind == "garbage":
            await send_bytes(send, 200, faults.GARBAGE_BODY, CONTENT_TYPE.encode())
        elif fault.kind == "html":
            await send_bytes(send, 200, faults.HTML_BODY, b"text/html; charset=utf-8")
        elif fault.kind == "truncated":
            body = faults.truncated(self.sim.telemetry.render())
            await send_bytes(send, 200, body, CONTENT_TYPE.encode())
        else:
            await send_bytes(send, 200, self.sim.telemetry.render(), CONTENT_TYPE.encode())

    # generation

    async def chat_completions(self, request: HttpRequest, send: Send) -> None:
        await self._generate(request, send, chat=True)

    async def completions(self, request: HttpRequest, send: Send) -> None:
        await self._generate(request, send, chat=False)

    async def _generate(self, request: HttpRequest, send: Send, *, chat: bool) -> None:
        config = self.sim.config
        content_type = request.header(b"content-type")
        try:
            if chat:
                plan = protocol.chat_plan(
                    protocol.parse_request(request.body, protocol.ChatRequest, content_type), config
                )
            else:
                plan = protocol.completion_plan(
                    protocol.parse_request(request.body, protocol.CompletionRequest, content_type),
                    config,
                )
        except protocol.ApiError as exc:
            await send_json(send, exc.status, exc.body)
            return
        truth = self.sim.truth
        api = self.sim.submit(plan.spec)
        session = Generation(self, api, plan, truth, chat=chat)
        if plan.stream:
            await session.stream(request.receive, send)
        else:
            await session.respond(request.receive, send)

    # /sim control

    async def ground_truth(self, request: HttpRequest, send: Send) -> None:
        await send_json(send, 200, self.sim.ground_truth())

    async def get_drafter(self, request: HttpRequest, send: Send) -> None:
        await send_json(send, 200, {"quality": self.sim.quality, "miss_rate": self.sim.miss_rate})

    async def set_drafter(self, request: HttpRequest, send: Send) -> None:
        body = _json_object(request.body)
        values: dict[str, float | None] = {}
        for key in ("quality", "miss_rate"):
            value = None if body is None else body.get(key)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0.0 <= value <= 1.0
            ):
                await send_json(send, 400, {"error": f"{key} must be a number in [0, 1]"})
                return
            values[key] = None if value is None else float(value)
        if body is None or all(v is None for v in values.values()):
            await send_json(send, 400, {"error": 'expected {"quality": 0..1, "miss_rate": 0..1}'})
            return
        self.sim.set_drafter(values["quality"], values["miss_rate"])
        await self.get_drafter(request, send)

    async def restart(self, request: HttpRequest, send: Send) -> None:
        body = _json_object(request.body) or {}
        downtime = body.get("downtime", 0)
        if isinstance(downtime, bool) or not isinstance(downtime, int | float) or downtime < 0:
            await send_json(send, 400, {"error": "downtime must be a non-negative number"})
            return
        self.sim.restart()
        await send_json(send, 200, {"restarts": self.sim.restarts, "since": self.sim.started_at})
        if downtime:
            self._refuse(float(downtime))

    async def get_fault(self, request: HttpRequest, send: Send) -> None:
        await send_json(send, 200, self.fault.as_json(self.clock()))

    async def set_fault(self, request: HttpRequest, send: Send) -> None:
        try:
            fault = faults.parse_fault(_json_object(request.body), self.clock())
        except ValueError as exc:
            await send_json(send, 400, {"error": str(exc)})
            return
        if fault.kind == "refuse" and self.listener is None:
            await send_json(send, 409, {"error": "refuse needs the simulator's own server"})
            return
        self.fault = fault
        await self.get_fault(request, send)
        if fault.kind == "refuse":
            self._refuse(fault.until - self.clock())

    async def config(self, request: HttpRequest, send: Send) -> None:
        config = self.sim.config
        spec = config.speculative
        await send_json(
            send,
            200,
            {
                "vllm_version": VLLM_VERSION,
                "served_model_name": config.served_model_name,
                "speculative_method": None if spec is None else spec.method,
                "num_speculative_tokens": config.k_max,
                "num_speculative_tokens_per_batch_size": []
                if spec is None
                else [[r.lo, r.hi, r.k] for r in spec.per_batch_size],
                "per_request_spec_decode_metrics": config.per_request_spec_decode_metrics,
                "enable_per_request_metrics": config.enable_per_request_metrics,
                "enable_force_include_usage": config.enable_force_include_usage,
                "data_parallel_size": config.data_parallel_size,
                "api_server_count": config.effective_api_server_count,
                "default_temperature": config.default_temperature,
                "seed": config.seed,
                "metric_names": config.metric_names,
                "speed": config.speed,
                "max_num_seqs": config.max_num_seqs,
                "max_model_len": config.max_model_len,
                "system_fingerprint": self.sim.fingerprint,
            },
        )

    def _refuse(self, seconds: float) -> None:
        if self.listener is None or seconds <= 0:
            return
        task = asyncio.create_task(self.listener.refuse_for(seconds))
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw.strip() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


class Generation:
    """One generation request on the HTTP side: waits for the engine, writes the response."""

    def __init__(
        self, app: SimApp, api: ApiRequest, plan: protocol.Plan, truth: GroundTruth, *, chat: bool
    ) -> None:
        self.app = app
        self.api = api
        self.plan = plan
        self.spec = plan.spec
        self.truth = truth
        self.chat = chat
        self.config = app.sim.config

    @property
    def attributable(self) -> bool:
        """vLLM returns per-request metrics only for one prompt with n == 1."""
        return len(self.api.choices) == 1

    def request_metrics(self) -> dict[str, Any] | None:
        if not self.attributable:
            return None
        speculative = (
            self.config.speculative is not None
            and self.config.per_request_spec_decode_metrics != "none"
        )
        return responses.per_request_metrics(
            self.api.choices[0],
            timings=self.config.enable_per_request_metrics,
            speculative=speculative,
        )

    def record_attribution(self, metrics: dict[str, Any] | None) -> None:
        returned = metrics is not None and metrics.get("speculative_decoding") is not None
        for choice in self.api.choices:
            self.truth.record_attribution(returned, choice.stats.counts())

    async def respond(self, receive: Receive, send: Send) -> None:
        watcher = asyncio.create_task(watch_disconnect(receive, self.api))
        try:
            await self.api.finished.wait()
        finally:
            watcher.cancel()
        if self.api.abort_reason is not None:
            await self._aborted(send)
            return
        outputs: dict[int, list[StepOutput]] = {}
        while not self.api.queue.empty():
            output = self.api.queue.get_nowait()
            if output is not None:
                outputs.setdefault(output.choice, []).append(output)
        choices = [
            responses.ChoiceResult(
                index=index,
                text=self.echoed(index)
                + self.shown("".join(o.text for o in outputs.get(index, []))),
                finish_reason=outputs[index][-1].finish_reason if outputs.get(index) else None,
                tokens=sum(o.tokens for o in outputs.get(index, [])),
            )
            for index in range(len(self.api.choices))
        ]
        metrics = self.request_metrics()
        build = responses.chat_completion if self.chat else responses.text_completion
        body = build(
            request_id=self.api.request_id,
            created=self.api.created,
            model=self.config.served_model_name,
            fingerprint=self.app.sim.fingerprint,
            choices=choices,
            prompt_tokens=sum(self.spec.prompt_tokens),
            metrics=metrics,
        )
        await send_json(send, 200, body)
        self.record_attribution(metrics)

    async def _aborted(self, send: Send) -> None:
        if self.api.abort_reason == "client":
            self.record_attribution(None)
            return
        await send_json(
            send,
            500,
            protocol.error_body(
                "EngineCore encountered an issue: the engine restarted.",
                "InternalServerError",
                500,
                None,
            ),
        )

    def echoed(self, choice: int) -> str:
        """The prompt text a completion with ``echo`` repeats before this choice's output."""
        echo = self.plan.echo
        return "" if echo is None else echo.texts[choice // self.spec.n]

    def shown(self, generated: str) -> str:
        """``echo`` with ``max_tokens: 0`` generates one token and shows none."""
        return "" if self.plan.echo is not None and self.plan.echo.prompt_only else generated

    async def stream(self, receive: Receive, send: Send) -> None:
        include_usage = self.plan.include_usage
        writer = responses.ChunkWriter(
            chat=self.chat,
            request_id=self.api.request_id,
            created=self.api.created,
            model=self.config.served_model_name,
            continuous_usage_prompt_tokens=[
                self.spec.prompt_tokens[index // self.spec.n]
                for index in range(len(self.api.choices))
            ]
            if self.plan.continuous_usage
            else None,
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", SSE_TYPE), VARY],
            }
        )
        if self.chat:
            roles = b"".join(writer.role(i) for i in range(len(self.api.choices)))
            await send({"type": "http.response.body", "body": roles, "more_body": True})
        watcher = asyncio.create_task(watch_disconnect(receive, self.api))
        try:
            completed = await self._stream_outputs(writer, send, include_usage)
        finally:
            watcher.cancel()
        if not completed:
            if self.api.abort_reason == "client":
                self.record_attribution(None)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        tail = b""
        metrics = None
        if include_usage:
            metrics = self.request_metrics()
            tokens = sum(choice.generated for choice in self.api.choices)
            tail = writer.usage(
                sum(self.spec.prompt_tokens), tokens, self.app.sim.fingerprint, metrics
            )
        await send(
            {"type": "http.response.body", "body": tail + responses.DONE, "more_body": False}
        )
        self.record_attribution(metrics)

    async def _stream_outputs(
        self, writer: responses.ChunkWriter, send: Send, include_usage: bool
    ) -> bool:
        """Write chunks until every choice finished (True) or the request was aborted (False)."""
        remaining = len(self.api.choices)
        generated = [0] * remaining
        echo = self.plan.echo
        echo_pending = [echo is not None] * remaining
        fingerprint = None if include_usage else self.app.sim.fingerprint
        queue = self.api.queue
        while remaining:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            if any(output is None for output in batch):
                return False
            outputs = [o for o in batch if o is not None]
            if self.config.chunk_merging:
                outputs = merge_outputs(outputs)
            chunks = []
            for output in outputs:
                index = output.choice
                generated[index] += output.tokens
                shown, prompt_ids = self.shown(output.text), None
                if echo is not None and echo_pending[index]:
                    echo_pending[index] = False
                    shown = self.echoed(index) + shown
                    prompt_ids = list(echo.token_ids[index // self.spec.n])
                if output.finish_reason is None:
                    chunks.append(writer.content(index, shown, generated[index], prompt_ids))
                else:
                    remaining -= 1
                    chunks.append(
                        writer.finish(
                            index,
                            shown,
                            output.finish_reason,
                            fingerprint,
                            completion_tokens=generated[index],
                            prompt_token_ids=prompt_ids,
                        )
                    )
            await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
        return True


def merge_outputs(outputs: list[StepOutput]) -> list[StepOutput]:
    """Steps a slow client has not read yet arrive as one chunk per choice (as in vLLM)."""
    merged: dict[int, StepOutput] = {}
    for output in outputs:
        previous = merged.get(output.choice)
        if previous is None:
            merged[output.choice] = StepOutput(
                output.choice, output.text, output.tokens, output.finish_reason
            )
        else:
            previous.text += output.text
            previous.tokens += output.tokens
            previous.finish_reason = output.finish_reason
    return list(merged.values())

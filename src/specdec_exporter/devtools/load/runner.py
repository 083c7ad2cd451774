"""The load run: N async workers sharing one httpx client, one request at a time each.

``run_load(config)`` is the in-process entry point (the CLI, ``demo`` and ``sweep`` call it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from specdec_exporter.deadline import total_deadline
from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.parse import (
    MalformedResponseError,
    ServerStreamError,
    StreamTally,
    parse_completion,
)
from specdec_exporter.devtools.load.plan import DURATION_DECK_SIZE, PlannedRequest, Planner
from specdec_exporter.devtools.load.results import (
    ERROR_CONNECT,
    ERROR_DISCONNECT,
    ERROR_INCOMPLETE,
    ERROR_MALFORMED,
    ERROR_STREAM,
    ERROR_TIMEOUT,
    LoadResult,
    RequestResult,
    http_error_kind,
)
from specdec_exporter.devtools.load.sse import SseDecoder

MODEL_LOOKUP_SECONDS = 10.0
"""The longest GET /v1/models may take, whole."""
ENDPOINT_PATHS: dict[str, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
}


@dataclass(frozen=True)
class Progress:
    done: int
    errors: int
    elapsed: float


ProgressCallback = Callable[[Progress], None]


FAILURE_TEXT = {
    ERROR_CONNECT: "cannot connect",
    ERROR_TIMEOUT: "no answer in time",
    ERROR_DISCONNECT: "the connection broke off",
    ERROR_MALFORMED: "not an HTTP answer",
}
"""A failed request's kind, as a sentence part for a person."""


class ModelLookupError(RuntimeError):
    """GET /v1/models failed or listed no model; the message is one readable line."""


def build_client(
    config: LoadConfig, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """One client for the run: HTTP/1.1 keep-alive, one pooled connection per worker."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    return httpx.AsyncClient(
        base_url=config.url,
        headers=headers,
        limits=httpx.Limits(
            max_connections=config.concurrency, max_keepalive_connections=config.concurrency
        ),
        timeout=httpx.Timeout(config.timeout, connect=min(config.connect_timeout, config.timeout)),
        transport=transport,
        verify=config.vllm_ssl_context(),
    )


async def fetch_model(client: httpx.AsyncClient, seconds: float) -> str:
    """The first model id from GET /v1/models, answered whole within ``seconds`` (at most
    MODEL_LOOKUP_SECONDS: a list of models is instant, a server that trickles it is not one)."""
    try:
        async with total_deadline(min(seconds, MODEL_LOOKUP_SECONDS)):
            response = await client.get("/v1/models")
    except httpx.HTTPError as exc:
        kind = error_kind(exc)
        raise ModelLookupError(f"GET /v1/models: {FAILURE_TEXT.get(kind, kind)}") from None
    if response.status_code >= 400:
        raise ModelLookupError(f"GET /v1/models answered HTTP {response.status_code}")
    try:
        return str(response.json()["data"][0]["id"])
    except (ValueError, LookupError, TypeError):
        raise ModelLookupError("GET /v1/models listed no model id") from None


async def run_load(
    config: LoadConfig,
    on_progress: ProgressCallback | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> LoadResult:
    """Run the load described by ``config``; ``on_progress`` is called after every request."""
    async with build_client(config, transport) as client:
        model = config.model or await fetch_model(client, config.timeout)
        return await _Run(config, client, model, on_progress).execute()


def request_body(config: LoadConfig, model: str, plan: PlannedRequest) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": config.max_tokens}
    if config.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": plan.prompt}]
    else:
        body["prompt"] = plan.prompt
    if plan.temperature is not None:
        body["temperature"] = plan.temperature
    if plan.stream:
        body["stream"] = True
        if config.include_usage:
            body["stream_options"] = {"include_usage": True}
    return body


def error_kind(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return ERROR_TIMEOUT
    if isinstance(exc, httpx.ConnectError):
        return ERROR_CONNECT
    if isinstance(exc, httpx.DecodingError):
        return ERROR_MALFORMED
    return ERROR_DISCONNECT


class _Run:
    def __init__(
        self,
        config: LoadConfig,
        client: httpx.AsyncClient,
        model: str,
        on_progress: ProgressCallback | None,
    ) -> None:
        self._config = config
        self._client = client
        self._model = model
        self._on_progress = on_progress
        self._path = ENDPOINT_PATHS[config.endpoint]
        self._limit = config.request_limit
        deck_size = DURATION_DECK_SIZE if self._limit is None else self._limit
        self._planner = Planner(
            config.mix, config.stream_share, config.prompts, deck_size=deck_size, seed=config.seed
        )
        self._results: list[RequestResult] = []
        self._errors = 0
        self._start = 0.0
        self._deadline: float | None = None

    async def execute(self) -> LoadResult:
        self._start = time.perf_counter()
        if self._config.duration is not None:
            self._deadline = self._start + self._config.duration
        workers = self._config.concurrency
        if self._limit is not None:
            workers = min(workers, self._limit)
        async with asyncio.TaskGroup() as group:
            for _ in range(workers):
                group.create_task(self._work())
        elapsed = time.perf_counter() - self._start
        return LoadResult(self._model, self._config.endpoint, elapsed, tuple(self._results))

    def _next_plan(self) -> PlannedRequest | None:
        if self._limit is not None and self._planner.issued >= self._limit:
            return None
        if self._deadline is not None and time.perf_counter() >= self._deadline:
            return None
        return self._planner.next_plan()

    async def _work(self) -> None:
        while (plan := self._next_plan()) is not None:
            self._record(await self._send(plan))

    def _record(self, result: RequestResult) -> None:
        self._results.append(result)
        self._errors += not result.ok
        if self._on_progress is not None:
            elapsed = time.perf_counter() - self._start
            self._on_progress(Progress(len(self._results), self._errors, elapsed))

    async def _send(self, plan: PlannedRequest) -> RequestResult:
        body = request_body(self._config, self._model, plan)
        started = time.perf_counter()
        try:
            async with total_deadline(self._config.timeout):  # --timeout: the whole request
                if plan.stream:
                    return await self._send_streaming(plan, body, started)
                return await self._send_plain(plan, body, started)
        except httpx.HTTPError as exc:
            return self._failure(plan, started, error_kind(exc))
        except MalformedResponseError:
            return self._failure(plan, started, ERROR_MALFORMED)
        except ServerStreamError:
            return self._failure(plan, started, ERROR_STREAM)

    async def _send_plain(
        self, plan: PlannedRequest, body: dict[str, Any], started: float
    ) -> RequestResult:
        response = await self._client.post(self._path, json=body)
        if response.status_code >= 400:
            return self._failure(
                plan, started, http_error_kind(response.status_code), response.status_code
            )
        completion = parse_completion(response.content)
        return RequestResult(
            index=plan.index,
            temperature=plan.temperature,
            stream=False,
            started=started - self._start,
            latency=time.perf_counter() - started,
            status=response.status_code,
            output_tokens=completion.output_tokens,
            tokens_from_usage=completion.output_tokens is not None,
            spec=completion.spec,
            server_tpot=completion.server_tpot,
        )

    async def _send_streaming(
        self, plan: PlannedRequest, body: dict[str, Any], started: float
    ) -> RequestResult:
        tally = StreamTally(started)
        async with self._client.stream("POST", self._path, json=body) as response:
            if response.status_code >= 400:
                await response.aread()
                return self._failure(
                    plan, started, http_error_kind(response.status_code), response.status_code
                )
            decoder = SseDecoder()
            async for data in response.aiter_bytes():
                now = time.perf_counter()
                for payload in decoder.feed(data):
                    tally.add(payload, now)
            for payload in decoder.close():
                tally.add(payload, time.perf_counter())
        ended = time.perf_counter()
        if not tally.done:
            return self._failure(plan, started, ERROR_INCOMPLETE, response.status_code)
        return RequestResult(
            index=plan.index,
            temperature=plan.temperature,
            stream=True,
            started=started - self._start,
            latency=ended - started,
            status=response.status_code,
            output_tokens=tally.output_tokens,
            tokens_from_usage=tally.usage_tokens is not None,
            chunks=tally.chunks,
            content_chunks=tally.content_chunks,
            ttft=tally.ttft,
            spec=tally.spec,
            server_tpot=tally.server_tpot,
        )

    def _failure(
        self, plan: PlannedRequest, started: float, kind: str, status: int | None = None
    ) -> RequestResult:
        return RequestResult(
            index=plan.index,
            temperature=plan.temperature,
            stream=plan.stream,
            started=started - self._start,
            latency=time.perf_counter() - started,
            error=kind,
            status=status,
        )

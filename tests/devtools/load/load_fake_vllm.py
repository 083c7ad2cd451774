"""A fake OpenAI-compatible server replaying real vLLM 0.32 captures, with scripted failures.

The behaviour of a request is chosen by its model name (``http-500``, ``cut-stream``, ...) or,
for mixed runs, by its temperature through ``FakeVllm.fail_at``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from specdec_exporter.devtools.load.sse import DONE, SseDecoder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32.0-cpu"
MODEL = "tiny-llama"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def fixture_response(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / "responses" / name).read_text())
    return dict(document["response"])


def fixture_payloads(name: str) -> list[bytes]:
    """The data of each SSE event of a capture, in order."""
    decoder = SseDecoder()
    return [*decoder.feed((FIXTURES / "streams" / name).read_bytes()), *decoder.close()]


def sse_event(payload: bytes) -> bytes:
    """One event as vLLM frames it."""
    return b"data: " + payload + b"\n\n"


def as_completions_payload(payload: bytes) -> bytes:
    """Rewrite a chat chunk as a /v1/completions chunk (``text`` instead of ``delta``)."""
    if payload == DONE:
        return payload
    chunk = json.loads(payload)
    chunk["choices"] = [as_completions_choice(choice) for choice in chunk["choices"]]
    return json.dumps(chunk).encode()


def as_completions_choice(choice: dict[str, Any]) -> dict[str, Any]:
    content = choice.get("delta", {}).get("content") or choice.get("message", {}).get("content")
    return {
        "index": choice["index"],
        "text": content or "",
        "finish_reason": choice.get("finish_reason"),
    }


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    client: tuple[str, int] | None


@dataclass
class FakeVllm:
    """ASGI app. ``received`` logs every POST; ``fail_at`` maps a temperature to a behaviour."""

    received: list[Received] = field(default_factory=list)
    fail_at: dict[float, str] = field(default_factory=dict)
    models_status: int = 200

    def reset(self) -> None:
        self.received.clear()
        self.fail_at.clear()
        self.models_status = 200

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET" and scope["path"] == "/v1/models":
            await self._models(send)
            return
        raw = await read_body(receive)
        headers = {key.decode(): value.decode() for key, value in scope["headers"]}
        body = json.loads(raw)
        self.received.append(Received(scope["path"], headers, body, scope.get("client")))
        behaviour = self.fail_at.get(body.get("temperature", -1.0), body["model"])
        request = Received(scope["path"], headers, body, scope.get("client"))
        await self._answer(behaviour, request, receive, send)

    async def _models(self, send: Send) -> None:
        document = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        await send_json(send, self.models_status, document)

    async def _answer(
        self, behaviour: str, request: Received, receive: Receive, send: Send
    ) -> None:
        body, completions = request.body, request.path == "/v1/completions"
        if behaviour.startswith("http-"):
            echo = {"error": {"message": "refused", "echo": request.headers.get("authorization")}}
            await send_json(send, int(behaviour.removeprefix("http-")), echo)
        elif behaviour == "hang":
            await wait_for_disconnect(receive)
        elif body.get("stream"):
            await self._stream(behaviour, body, completions, send)
        else:
            await self._plain(behaviour, body, completions, send)

    async def _plain(
        self, behaviour: str, body: dict[str, Any], completions: bool, send: Send
    ) -> None:
        if behaviour == "bad-json":
            await send_bytes(send, 200, b'{"choices": [', "application/json")
            return
        if behaviour == "cut-stream":
            await send_start(send, 200, "application/json", length=1000)
            await send({"type": "http.response.body", "body": b'{"id": ', "more_body": True})
            raise RuntimeError("connection cut on purpose")
        document = fixture_response(plain_fixture(body))
        if completions:
            document["choices"] = [as_completions_choice(c) for c in document["choices"]]
        await send_json(send, 200, document)

    async def _stream(
        self, behaviour: str, body: dict[str, Any], completions: bool, send: Send
    ) -> None:
        payloads = fixture_payloads(stream_fixture(body))
        if completions:
            payloads = [as_completions_payload(payload) for payload in payloads]
        events = scripted_events(behaviour, [sse_event(payload) for payload in payloads])
        await send_start(send, 200, "text/event-stream")
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        if behaviour == "cut-stream":
            raise RuntimeError("connection cut on purpose")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def scripted_events(behaviour: str, events: list[bytes]) -> list[bytes]:
    if behaviour == "cut-stream":
        return events[:5]
    if behaviour == "no-done":
        return events[:-1]
    if behaviour == "bad-json":
        return [*events[:3], b"data: {not json\n\n", *events[3:]]
    if behaviour == "stream-error":
        error = b'data: {"error": {"message": "engine died", "code": 500}}\n\n'
        return [*events[:3], error]
    return events


def plain_fixture(body: dict[str, Any]) -> str:
    if "temperature" not in body:
        return "chat_no_temperature_nonstream_0.json"
    greedy = body["temperature"] == 0
    return "chat_T0p0_nonstream_0.json" if greedy else "chat_T0p8_nonstream_0.json"


def stream_fixture(body: dict[str, Any]) -> str:
    if not body.get("stream_options", {}).get("include_usage"):
        return "chat_T0p8_stream_no_include_usage_0.sse"
    return "chat_T0p0_stream_0.sse" if body.get("temperature") == 0 else "chat_T0p8_stream_0.sse"


async def read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


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


@contextmanager
def serve_in_thread(app: FakeVllm) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port) in a thread; yield its base URL.

    The socket listens before the thread starts, so clients can connect at once.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
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


def closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port

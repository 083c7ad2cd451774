"""Test helpers for the tap: a scriptable raw HTTP/1.1 upstream that replays the real vLLM
captures, the tap started next to it, and a raw HTTP client that keeps every byte."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.devtools.load.sse import DONE, SseDecoder
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.tap_parts import tap_config
from specdec_exporter.tap.proxy import run_tap
from specdec_exporter.tap.sse import iter_events
from specdec_exporter.tap.stats import RequestStats

FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.32.0-cpu"
MODEL = "tiny-llama"


def fixture_response(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / "responses" / name).read_text())
    return document


def fixture_stream(name: str) -> bytes:
    return (FIXTURES / "streams" / name).read_bytes()


def sse_events(stream: bytes) -> list[bytes]:
    """Each event of a capture, with its blank line (as vLLM writes one per HTTP chunk), cut by
    the tap's own splitter."""
    return iter_events(stream)


def shape(value: Any) -> Any:
    """A chunk's structure: every key in its order, the type of every leaf (not the generated
    text), list lengths; the fingerprint's value is kept, it must be exactly where vLLM puts it."""
    if isinstance(value, dict):
        return tuple((key, shape(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(shape(item) for item in value)
    if isinstance(value, str) and value.startswith("vllm-"):
        return value
    return type(value).__name__


def chunk_sequence(stream: bytes) -> list[Any]:
    """The shape of each event's data (the load generator's decoder), runs of equal shapes (the
    content chunks) as one."""
    decoder = SseDecoder()
    payloads = decoder.feed(stream) + decoder.close()
    shapes = [DONE if data == DONE else shape(json.loads(data)) for data in payloads]
    return [item for index, item in enumerate(shapes) if index == 0 or shapes[index - 1] != item]


@dataclass
class Received:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What the fake upstream answers: a status, headers, and body pieces."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    pieces: list[bytes] = field(default_factory=list)
    chunked: bool = False
    die_after: int | None = None
    """Close the connection after writing this many pieces (a crash mid-stream)."""
    hold_open: bool = False
    """After the pieces, keep the response open until the client goes."""
    hang: bool = False
    """Write nothing at all until the client goes."""
    drop: bool = False
    """Close the connection without answering."""
    pace: float = 0.0
    """Seconds between pieces (a slow but steady stream)."""


def json_reply(document: Any, status: int = 200) -> Reply:
    body = json.dumps(document).encode()
    return Reply(status, [("content-type", "application/json")], [body])


def sse_reply(stream: bytes, **options: Any) -> Reply:
    return Reply(
        200,
        [("content-type", "text/event-stream; charset=utf-8")],
        sse_events(stream),
        chunked=True,
        **options,
    )


def replay_vllm(request: Received) -> Reply:
    """Answer as the real vLLM of the captures did: by stream / include_usage / n / temperature."""
    body = request.json()
    if body.get("stream"):
        with_usage = (body.get("stream_options") or {}).get("include_usage")
        greedy = body.get("temperature") == 0.0
        name = (
            ("chat_T0p0_stream_0.sse" if greedy else "chat_T0p8_stream_0.sse")
            if with_usage
            else "chat_T0p8_stream_no_include_usage_0.sse"
        )
        return sse_reply(fixture_stream(name))
    if body.get("n", 1) > 1:
        return json_reply(fixture_response("chat_n2_T0p8_nonstream_0.json")["response"])
    if "temperature" not in body:
        return json_reply(fixture_response("chat_no_temperature_nonstream_0.json")["response"])
    name = (
        "chat_T0p0_nonstream_0.json" if body["temperature"] == 0.0 else "chat_T0p8_nonstream_0.json"
    )
    return json_reply(fixture_response(name)["response"])


Handler = Callable[[Received], Reply]


class FakeUpstream:
    """A raw asyncio HTTP/1.1 server; records requests and client disconnects."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.received: list[Received] = []
        self.disconnects = 0
        self.disconnected = asyncio.Event()
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with suppress(asyncio.CancelledError, Exception):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            while (request := await read_request(reader)) is not None:
                self.received.append(request)
                if not await self._answer(self.handler(request), reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _answer(
        self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if reply.drop:
            writer.transport.abort()
            return False
        if reply.hang:
            await self._wait_for_disconnect(reader)
            return False
        head = [f"HTTP/1.1 {reply.status} OK", *(f"{k}: {v}" for k, v in reply.headers)]
        if reply.chunked:
            head.append("transfer-encoding: chunked")
        else:
            head.append(f"content-length: {sum(len(piece) for piece in reply.pieces)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        for index, piece in enumerate(reply.pieces):
            if reply.die_after is not None and index == reply.die_after:
                writer.transport.abort()
                return False
            writer.write(b"%x\r\n%b\r\n" % (len(piece), piece) if reply.chunked else piece)
            await writer.drain()
            await asyncio.sleep(reply.pace)
        if reply.hold_open:
            await self._wait_for_disconnect(reader)
            return False
        if reply.chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def _wait_for_disconnect(self, reader: asyncio.StreamReader) -> None:
        await reader.read()  # returns b"" at EOF, raises on reset
        self.disconnects += 1
        self.disconnected.set()


async def read_request(reader: asyncio.StreamReader) -> Received | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        body = await read_chunked(reader)
    else:
        body = b""
    return Received(method, target, headers, body)


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


@dataclass
class TapUnderTest:
    url: str
    upstream: FakeUpstream
    stats: RequestStats
    settings: Settings

    @property
    def address(self) -> tuple[str, int]:
        return address_of(self.url)

    @property
    def upstream_address(self) -> tuple[str, int]:
        return address_of(self.settings.vllm_url)


def address_of(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


@asynccontextmanager
async def running_tap(
    handler: Handler = replay_vllm,
    *,
    upstream_url: str | None = None,
    models: frozenset[str] | Callable[[], frozenset[str]] = frozenset({MODEL}),
    k: int | None = 4,
    **settings: Any,
) -> AsyncIterator[TapUnderTest]:
    """The fake upstream and the tap in this event loop; the tap listens on an OS-chosen port."""
    upstream = FakeUpstream(handler)
    url = upstream_url or await upstream.start()
    config = Settings(vllm_url=url, proxy_listen="127.0.0.1:0", **settings)
    stats = RequestStats(TemperatureBuckets(config.temperature_buckets), lambda _: k)
    started: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    known = models if callable(models) else (lambda: models)
    for model in () if callable(models) else models:  # as the sidecar does at each poll
        stats.add_model(model)
    task = asyncio.create_task(run_tap(tap_config(config), stats, known, started.set_result))
    try:
        host, port = await asyncio.wait_for(asyncio.shield(started), 5)
        yield TapUnderTest(f"http://{host}:{port}", upstream, stats, config)
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await upstream.stop()


async def raw_exchange(address: tuple[str, int], request: bytes) -> bytes:
    """Send raw bytes, read until the server closes: every byte the tap wrote."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()


def post_request(
    path: str, body: bytes, *, close: bool = True, extra: tuple[str, ...] = ()
) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "host: tap",
        "content-type: application/json",
        f"content-length: {len(body)}",
        *extra,
    ]
    if close:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def split_response(raw: bytes) -> tuple[bytes, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


def dechunk(body: bytes) -> bytes:
    out, rest = [], body
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(rest[:size])
        rest = rest[size + 2 :]


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition with a deadline (no fixed sleeps in tests)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def without_usage(stream: bytes) -> bytes:
    """What the same vLLM generation looks like without include_usage (per the two captures):
    no usage chunk, the fingerprint on the finish chunk. Written independently of the tap."""
    events = sse_events(stream)
    usage = next(i for i, event in enumerate(events) if b'"choices":[]' in event)
    fingerprint = json.loads(events[usage].removeprefix(b"data: "))["system_fingerprint"]
    finish = events[usage - 1]
    assert finish.endswith(b"]}\n\n")
    events[usage - 1] = finish[:-3] + b',"system_fingerprint":"%s"}\n\n' % fingerprint.encode()
    del events[usage]
    return b"".join(events)


def consistent_vllm(request: Received) -> Reply:
    """One seeded generation per temperature, with or without include_usage, like real vLLM."""
    body = request.json()
    greedy = body.get("temperature") == 0.0
    if not body.get("stream"):
        return replay_vllm(request)
    stream = fixture_stream("chat_T0p0_stream_0.sse" if greedy else "chat_T0p8_stream_0.sse")
    with_usage = (body.get("stream_options") or {}).get("include_usage")
    return sse_reply(stream if with_usage else without_usage(stream))


@dataclass
class RawConnection:
    """Every byte one upstream connection received, and whether the tap has closed it."""

    data: bytearray = field(default_factory=bytearray)
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class RawUpstream:
    """A raw upstream: answers each request head with scripted bytes, records every byte.

    An answer given as a list is written piece by piece, 50 ms apart (separate reads for the
    tap). After an answer that starts with a 101, it echoes what it reads in upper case.
    """

    def __init__(self, answer: Callable[[bytes], bytes | list[bytes]]) -> None:
        self.answer = answer
        self.connections: list[RawConnection] = []
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task

    @property
    def received(self) -> bytes:
        return b"".join(bytes(connection.data) for connection in self.connections)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        connection = RawConnection()
        self.connections.append(connection)
        try:
            await self._exchange(reader, writer, connection)
        except ConnectionError:
            pass
        finally:
            self._tasks.discard(task)
            connection.closed.set()
            writer.close()

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: RawConnection
    ) -> None:
        pending, tunnel = b"", False
        while data := await reader.read(65536):
            connection.data += data
            if tunnel:
                writer.write(data.upper())
                continue
            pending += data
            while not tunnel and (end := pending.find(b"\r\n\r\n")) >= 0:
                head, pending = pending[: end + 4], pending[end + 4 :]
                answer = self.answer(head)
                for index, piece in enumerate([answer] if isinstance(answer, bytes) else answer):
                    if index:
                        await writer.drain()
                        await asyncio.sleep(0.05)
                    writer.write(piece)
                tunnel = (answer if isinstance(answer, bytes) else b"".join(answer)).startswith(
                    b"HTTP/1.1 101"
                )
            if tunnel and pending:
                writer.write(pending.upper())


@asynccontextmanager
async def raw_upstream(
    answer: Callable[[bytes], bytes | list[bytes]],
) -> AsyncIterator[RawUpstream]:
    upstream = RawUpstream(answer)
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.stop()


async def read_all(address: tuple[str, int], request: bytes, timeout: float = 5.0) -> bytes:
    """``raw_exchange`` with a shorter deadline, for tests where a hang is the bug."""
    return await asyncio.wait_for(raw_exchange(address, request), timeout)

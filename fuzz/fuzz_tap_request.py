"""Coverage-guided fuzzing of the tap's request head/body path: arbitrary client bytes, cut into
pieces at random, into a ``proxy.ClientConnection`` with a fake transport and a fake upstream
pool, no sockets; the body part also straight into ``request.plan_request``.

What must hold for every input:
- nothing raises (the connection's callbacks, the exchange's tasks, ``plan_request``);
- every request that goes upstream has a well-formed HTTP/1.1 head: a request line ending in
  ``HTTP/1.1``, header lines without CR, LF or NUL, exactly one ``Host``, at most one framing
  header (exactly one when the client's request had a body), no hop-by-hop header outside an
  Upgrade, and a body framed as that header says;
- the body that goes upstream is the client's body, or the client's body plus one
  ``include_usage`` insertion; a rewritten body parses to the client's JSON with
  ``stream_options.include_usage`` true and nothing else changed.

The input is the client's bytes (so real requests seed the corpus); piece sizes and vLLM's
answers (JSON, a real vLLM 0.32 stream, an interim 100 then a 204) come from a seed derived
from it. Run like fuzz_sse.py (see fuzz/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import atheris
import httptools

with atheris.instrument_imports(include=["specdec_exporter"]):
    from specdec_exporter.core.buckets import TemperatureBuckets
    from specdec_exporter.sidecar.config import Settings
    from specdec_exporter.sidecar.tap_parts import tap_config
    from specdec_exporter.tap.http1 import HOP_BY_HOP
    from specdec_exporter.tap.proxy import ClientConnection, Tap
    from specdec_exporter.tap.request import plan_request
    from specdec_exporter.tap.routes import is_inspected
    from specdec_exporter.tap.sse import iter_events
    from specdec_exporter.tap.stats import RequestStats
    from specdec_exporter.tap.upstream import UpstreamConnection

INSERTIONS = (
    b'"stream_options":{"include_usage":true},',
    b',"stream_options":{"include_usage":true}',
    b',"include_usage":true',
    b'"include_usage":true',
)
"""The only bytes the tap may add to a request body (tap/request.py)."""
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
REQUEST_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([^\x00-\x20\x7f]+) HTTP/1\.1")
CAPTURE = (
    Path(__file__).resolve().parents[1]
    / "tests/fixtures/vllm-0.32.0-cpu/streams/chat_T0p8_stream_0.sse"
).read_bytes()
ANSWERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%b\r\n" % (len(event), event) for event in iter_events(CAPTURE))
    + b"0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
)
"""What the fake vLLM answers, chosen by the input's seed."""

SETTINGS = Settings(
    vllm_url="http://vllm:8000", proxy_listen="127.0.0.1:0", proxy_inspect_max_bytes=4096
)
CONFIG = tap_config(SETTINGS)
"""Built once, as the sidecar builds it (its SSL context loads a CA bundle: ~15 ms)."""
BUCKETS = TemperatureBuckets(SETTINGS.temperature_buckets)
STATS = RequestStats(BUCKETS, lambda _: 4)
LOOP = asyncio.new_event_loop()
logging.getLogger("specdec_exporter").setLevel(logging.CRITICAL)


class FakeTransport:
    """Records what is written; closing is a flag."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        assert not self.closing, "a write after close"
        self.data += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@dataclass
class Upstream:
    connection: UpstreamConnection
    transport: FakeTransport = field(default_factory=FakeTransport)
    answered: bool = False


class FakePool:
    """A new upstream connection for every request, its transport recorded."""

    def __init__(self) -> None:
        self.opened: list[Upstream] = []

    def take_idle(self) -> UpstreamConnection:
        connection = UpstreamConnection(lambda _: None)
        upstream = Upstream(connection)
        connection.connection_made(upstream.transport)  # type: ignore[arg-type]
        self.opened.append(upstream)
        return connection

    async def connect(self) -> UpstreamConnection:
        return self.take_idle()

    def close_all(self) -> None:
        pass


@dataclass
class Message:
    """One request as a reference parser reads the client's bytes."""

    method: bytes = b""
    target: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)


class ReferenceReader:
    """httptools over the whole input at once: what the client sent, request by request."""

    def __init__(self, data: bytes) -> None:
        self.messages: list[Message] = []
        self._parser = httptools.HttpRequestParser(self)
        # the tap reads no request past an error or an Upgrade either
        with contextlib.suppress(httptools.HttpParserError, httptools.HttpParserUpgrade):
            self._parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.messages.append(Message())

    def on_url(self, url: bytes) -> None:
        self.messages[-1].target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.messages[-1].headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.messages[-1].method = self._parser.get_method()

    def on_body(self, body: bytes) -> None:
        self.messages[-1].body += body


@dataclass
class Forwarded:
    """One request as it went upstream."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    complete: bool


def read_forwarded(data: bytes) -> Forwarded | None:
    """Check and split what one upstream connection received (None: not even a whole head)."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        assert not data, f"the head goes upstream in one write: {data[:200]!r}"
        return None
    lines = data[:end].split(b"\r\n")
    line = REQUEST_LINE.fullmatch(lines[0])
    assert line is not None, f"bad request line {lines[0]!r}"
    headers = []
    for raw in lines[1:]:
        name, colon, value = raw.partition(b": ")
        assert colon and TOKEN.fullmatch(name), f"bad header line {raw!r}"
        assert not any(c in value for c in b"\r\n\x00"), f"bad header value {raw!r}"
        headers.append((name.lower(), value))
    body, complete = unframe(headers, data[end + 4 :])
    return Forwarded(line[1], line[2], headers, body, complete)


def unframe(headers: list[tuple[bytes, bytes]], rest: bytes) -> tuple[bytes, bool]:
    names = [name for name, _ in headers]
    assert names.count(b"host") == 1, f"Host headers: {names.count(b'host')}"
    framing = [
        (name, value)
        for name, value in headers
        if name in (b"content-length", b"transfer-encoding")
    ]
    assert len(framing) <= 1, f"framing headers: {framing}"
    if not framing:
        assert not rest, "body bytes without a framing header"
        return b"", True
    name, value = framing[0]
    if name == b"content-length":
        assert value.isdigit(), f"content-length {value!r}"
        length = int(value)
        assert len(rest) <= length, "more body bytes than Content-Length"
        return rest, len(rest) == length
    assert value == b"chunked", f"transfer-encoding {value!r}"
    return dechunk(rest)


def dechunk(rest: bytes) -> tuple[bytes, bool]:
    """A chunked body as the tap writes it (a prefix of one while it streams)."""
    out = bytearray()
    while rest:
        size_end = rest.find(b"\r\n")
        if size_end < 0:
            break
        size = int(rest[:size_end], 16)
        assert rest[:size_end] == b"%x" % size, f"chunk size {rest[:size_end]!r}"
        chunk_end = size_end + 2 + size
        if len(rest) < chunk_end + 2:
            break
        assert rest[chunk_end : chunk_end + 2] == b"\r\n", "chunk without CRLF"
        if size == 0:
            assert rest == b"0\r\n\r\n", f"bytes after the last chunk: {rest!r}"
            return bytes(out), True
        out += rest[size_end + 2 : chunk_end]
        rest = rest[chunk_end + 2 :]
    return bytes(out), False


def one_insertion(original: bytes, sent: bytes) -> bool:
    """``sent`` is ``original`` with one of the tap's insertions somewhere."""
    extra = len(sent) - len(original)
    prefix = next(
        (i for i, (a, b) in enumerate(zip(original, sent, strict=False)) if a != b), len(original)
    )
    for member in INSERTIONS:
        if len(member) != extra:
            continue
        at = sent.find(member)
        while 0 <= at <= prefix:
            if sent[:at] + sent[at + extra :] == original:
                return True
            at = sent.find(member, at + 1)
    return False


def check_rewrite(original: bytes, sent: bytes) -> None:
    if sent == original:
        return
    assert one_insertion(original, sent), f"rewritten beyond one insertion: {sent[:300]!r}"
    try:
        before = json.loads(original)  # bytes: any encoding json.loads (and vLLM) reads
        after = json.loads(sent)
        options = before.get("stream_options") or {}
        expected = {**before, "stream_options": {**options, "include_usage": True}}
        assert canonical(after) == canonical(expected), "the rewrite changed the document"
    except RecursionError:
        pass  # too deep to compare here; the byte check above still held


def canonical(document: Any) -> str:
    return json.dumps(document, sort_keys=True)  # NaN != NaN, but its text is the same


def pieces(data: bytes, rng: random.Random) -> list[bytes]:
    if len(data) < 2:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 8))))
    return [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def drive(data: bytes, rng: random.Random) -> FakePool:
    """The client's bytes through one connection; vLLM answers each request once it is sent."""
    tap = Tap(CONFIG, STATS, lambda: frozenset({"tiny-llama"}))
    pool = FakePool()
    tap.pool = pool  # type: ignore[assignment]
    client = ClientConnection(tap)
    client.connection_made(FakeTransport())  # type: ignore[arg-type]
    for piece in pieces(data, rng):
        client.data_received(piece)
        await settle()
        for upstream in pool.opened:
            forwarded = read_forwarded(bytes(upstream.transport.data))
            if forwarded is not None and forwarded.complete and not upstream.answered:
                upstream.answered = True
                upstream.connection.data_received(ANSWERS[rng.randrange(len(ANSWERS))])
                await settle()
    client.connection_lost(None)
    await settle()
    return pool


def check_forwarded(data: bytes, pool: FakePool) -> None:
    """Each request that went upstream against the client's own, in order."""
    messages = iter(ReferenceReader(data).messages)
    for upstream in pool.opened:
        forwarded = read_forwarded(bytes(upstream.transport.data))
        if forwarded is None:
            continue
        sent = next(
            (m for m in messages if (m.method, m.target) == (forwarded.method, forwarded.target)),
            None,
        )
        assert sent is not None, f"forwarded a request the client did not send: {forwarded}"
        names = {name.lower() for name, _ in sent.headers}
        if names & {b"content-length", b"transfer-encoding"} or sent.body:
            assert any(
                name in (b"content-length", b"transfer-encoding") for name, _ in forwarded.headers
            ), "a body without its framing header"
        if b"upgrade" not in names:
            hop = {name for name, _ in forwarded.headers} & (HOP_BY_HOP - {b"transfer-encoding"})
            assert not hop, f"hop-by-hop headers forwarded: {hop}"
        original = bytes(sent.body)
        if not forwarded.complete:
            assert original.startswith(forwarded.body), "a streamed body changed"
        elif is_inspected(sent.method, sent.target):
            check_rewrite(original, forwarded.body)
        else:
            assert forwarded.body == original, "an uninspected body changed"


def check_plan(data: bytes) -> None:
    """``plan_request`` alone, on whatever follows the first blank line (or the whole input)."""
    head_end = data.find(b"\r\n\r\n")
    body = data if head_end < 0 else data[head_end + 4 :]
    plan = plan_request(body, BUCKETS, None)
    assert plan.undo_include_usage == (plan.body != body)
    check_rewrite(body, plan.body)


def test_one_input(data: bytes) -> None:
    rng = random.Random(zlib.crc32(data))
    errors: list[dict[str, Any]] = []
    LOOP.set_exception_handler(lambda _, context: errors.append(context))
    pool = LOOP.run_until_complete(drive(data, rng))
    assert not errors, errors[0].get("exception") or errors[0]
    check_forwarded(data, pool)
    check_plan(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()

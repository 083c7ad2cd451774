"""Whole upstream responses through the tap's response side, cut into reads at chosen points,
with fake transports (no sockets, so the cuts are exactly the reads the tap sees): what the
client receives, what a reference parser reads in the same bytes, and the checks that must
hold between them. Used by ``test_tap_response_split.py`` (Hypothesis) and by
``fuzz/fuzz_tap_response.py`` (atheris)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import httptools

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.tap_parts import tap_config
from specdec_exporter.tap.proxy import ClientConnection, Tap
from specdec_exporter.tap.stats import RequestStats
from specdec_exporter.tap.upstream import UpstreamConnection

MODEL = "tiny-llama"
STREAM_BODY = json.dumps(
    {"model": MODEL, "stream": True, "temperature": 0.8, "messages": []}
).encode()
REQUESTS = {
    "GET": b"GET /v1/models HTTP/1.1\r\nhost: tap\r\n\r\n",
    "HEAD": b"HEAD /v1/models HTTP/1.1\r\nhost: tap\r\n\r\n",
    "STREAM": b"POST /v1/chat/completions HTTP/1.1\r\nhost: tap\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
    % (len(STREAM_BODY), STREAM_BODY),
}
"""What the client asks: a verbatim relay, a head only, and a stream the tap rewrites."""
KINDS = tuple(REQUESTS)
SETTINGS = Settings(vllm_url="http://vllm:8000", proxy_listen="127.0.0.1:0")
CONFIG = tap_config(SETTINGS)
"""Built once, as the sidecar builds it (its SSL context loads a CA bundle: ~15 ms)."""
STATS = RequestStats(TemperatureBuckets(SETTINGS.temperature_buckets), lambda _: 4)


class FakeTransport:
    """Records what is written; a closing transport drops writes, as asyncio's does."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        if not self.is_closing():
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


def pieces(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({cut for cut in cuts if 0 < cut < len(data)})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def relay(kind: str, response: bytes, cuts: Sequence[int]) -> bytes:
    """What the client receives when vLLM answers ``REQUESTS[kind]`` with ``response`` in reads
    cut at ``cuts``, then closes the connection."""
    tap = Tap(CONFIG, STATS, lambda: frozenset({MODEL}))
    connection = UpstreamConnection(tap.pool.release)
    connection.connection_made(FakeTransport())  # type: ignore[arg-type]
    tap.pool.release(connection)  # the idle connection the exchange takes (the real pool's)
    client_transport = FakeTransport()
    client = ClientConnection(tap)
    client.connection_made(client_transport)  # type: ignore[arg-type]
    client.data_received(REQUESTS[kind])
    connection.reused = False  # as a new connection: its loss is final (no retry elsewhere)
    for piece in pieces(response, cuts):
        connection.data_received(piece)
    connection.connection_lost(None)
    return bytes(client_transport.data)


class SurplusError(Exception):
    pass


@dataclass
class Reference:
    """One response as httptools reads it from all of vLLM's bytes at once."""

    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    complete: bool = False
    """The final (non-1xx) response ended, the bytes parsed cleanly, and nothing followed."""
    _final: bool = False

    def on_message_begin(self) -> None:
        if self.complete:
            self.complete = False
            raise SurplusError
        self.headers, self.body = [], bytearray()

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._final:
            self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._final = self.status >= 200

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_message_complete(self) -> None:
        if self._final:
            self.complete = True

    def read(self, response: bytes, head_only: bool) -> Reference:
        """Fed a byte at a time, to find where the final response ends: any byte after that end
        (a second response, or a stray CRLF that llhttp skips) makes it not clean."""
        self._parser = httptools.HttpResponseParser(self)
        end = 0
        try:
            while end < len(response) and not self.complete:
                self._parser.feed_data(response[end : end + 1])
                end += 1
        except (httptools.HttpParserUpgrade, httptools.HttpParserError):
            self.complete = False
        if head_only and self._final:  # a HEAD's answer ends with its head
            end = response.rfind(b"\r\n\r\n") + 4
            self.complete = end == len(response) and self.status >= 200
        self.complete = self.complete and end == len(response)
        return self

    def unrelayable_coding(self) -> bool:
        """A ``Transfer-Encoding`` that is not one field saying ``chunked`` (nginx's rule)."""
        values = [value for name, value in self.headers if name == b"transfer-encoding"]
        return bool(values) and [value.strip().lower() for value in values] != [b"chunked"]


@dataclass
class ClientView:
    """The one response the client read: status, header fields, de-chunked body, trailers."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def client_view(output: bytes, kind: str) -> ClientView:
    """Parse what the client received; fails on anything but exactly one well-formed response."""
    head, separator, rest = output.partition(b"\r\n\r\n")
    assert separator, f"no complete head: {output[:200]!r}"
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"HTTP/1.1 "), lines[0]
    status = int(lines[0].split(b" ")[1])
    headers = [
        (name.lower(), value) for name, _, value in (line.partition(b": ") for line in lines[1:])
    ]
    names = [name for name, _ in headers]
    framing = [name for name in names if name in (b"content-length", b"transfer-encoding")]
    assert len(framing) <= 1, f"framing headers: {headers}"
    if kind == "HEAD" or status in (204, 304):
        assert not rest, f"a body where none may be: {rest[:100]!r}"
        return ClientView(status, headers, b"")
    if framing == [b"transfer-encoding"]:
        assert dict(headers)[b"transfer-encoding"].lower() == b"chunked"
        body, after = dechunk(rest)
        assert not after, f"bytes after the last chunk: {after[:100]!r}"
        return ClientView(status, headers, body)
    if framing == [b"content-length"]:
        length = int(dict(headers)[b"content-length"])
        assert len(rest) == length, (len(rest), length)
        return ClientView(status, headers, rest)
    return ClientView(status, headers, rest)  # until close


def dechunk(wire: bytes) -> tuple[bytes, bytes]:
    """A complete chunked body: (its data, what follows its trailer section)."""
    out = bytearray()
    while True:
        line_end = wire.index(b"\r\n")
        size = int(wire[:line_end].split(b";")[0], 16)
        wire = wire[line_end + 2 :]
        if size == 0:
            while not wire.startswith(b"\r\n"):  # trailer fields
                wire = wire[wire.index(b"\r\n") + 2 :]
            return bytes(out), wire[2:]
        out += wire[:size]
        assert wire[size : size + 2] == b"\r\n", "chunk without its CRLF"
        wire = wire[size + 2 :]


def check(kind: str, response: bytes, cuts: Sequence[int]) -> None:
    """Nothing raises; a response vLLM framed cleanly reaches the client whole, the same however
    its bytes are cut into reads (a rewritten stream: the same de-chunked body)."""
    split = relay(kind, response, cuts)
    whole = relay(kind, response, [])
    reference = Reference().read(response, head_only=kind == "HEAD")
    if not reference.complete or reference.status == 101:
        return  # not a clean response: a 502 or a cut, which may depend on the reads
    if reference.unrelayable_coding():
        assert client_view(whole, kind).status == client_view(split, kind).status == 502
        return
    view = client_view(split, kind)
    assert view == client_view(whole, kind), "the answer depends on how vLLM's bytes were read"
    assert view.status == reference.status
    rewritten = (
        kind == "STREAM"
        and reference.status == 200
        and any(
            name == b"content-type" and value.startswith(b"text/event-stream")
            for name, value in reference.headers
        )
    )
    if kind != "HEAD" and reference.status not in (204, 304) and not rewritten:
        assert view.body == bytes(reference.body), "the body changed"

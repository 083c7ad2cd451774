"""The tap's second round of hardening (issue 19): request and response trailers, a POST never
sent twice, the idle expiry of pooled connections as a setting, bodies in the encodings vLLM
accepts, and upstream transfer codings the tap cannot relay."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any

import pytest
from responsewire import FakeTransport as RecordingTransport
from tapfakes import (
    MODEL,
    Reply,
    dechunk,
    fixture_stream,
    json_reply,
    raw_upstream,
    read_all,
    running_tap,
    split_response,
    sse_events,
    wait_until,
)

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.tap_parts import tap_config
from specdec_exporter.tap.proxy import ClientConnection, Tap
from specdec_exporter.tap.request import plan_request
from specdec_exporter.tap.stats import RequestStats
from specdec_exporter.tap.upstream import Origin, UpstreamConnection, UpstreamPool

pytestmark = pytest.mark.anyio
CHAT = "/v1/chat/completions"
BODY = json.dumps(
    {"model": MODEL, "temperature": 0.0, "messages": [{"role": "user", "content": "hi"}]}
).encode()


def chunked_post(
    path: str, body: bytes, trailer: bytes, *, pieces: int = 1, close: bool = True
) -> bytes:
    """A chunked POST whose last chunk carries ``trailer`` (header lines, each ending CRLF)."""
    size = -(-len(body) // pieces)
    chunks = b"".join(
        b"%x\r\n%b\r\n" % (len(part), part)
        for part in (body[i : i + size] for i in range(0, len(body), size))
    )
    head = b"POST %b HTTP/1.1\r\nhost: tap\r\ncontent-type: application/json\r\n" % path.encode()
    head += b"transfer-encoding: chunked\r\n" + (b"connection: close\r\n" if close else b"")
    return head + b"\r\n" + chunks + b"0\r\n" + trailer + b"\r\n"


def counted(stats: RequestStats, bucket: str) -> float:
    return sum(
        summary.requests
        for summary in stats.bucket_summary()
        if summary.temperature_bucket == bucket
    )


# 1. a chunked request with a trailer


@pytest.mark.parametrize(
    "trailer",
    [b"X-Trailer: 1\r\n", b"X-One: 1\r\nX-Two: 2\r\n", b"Authorization: Bearer k\r\n"],
    ids=["one", "two", "authorization"],
)
@pytest.mark.parametrize("path", [CHAT, "/tokenize"], ids=["inspected", "uninspected"])
async def test_a_chunked_request_with_a_trailer_is_answered_and_the_trailer_dropped(
    trailer: bytes, path: str
) -> None:
    async with running_tap(lambda _: json_reply({"ok": True})) as tap:
        raw = await read_all(tap.address, chunked_post(path, BODY, trailer, pieces=3))
        assert raw.startswith(b"HTTP/1.1 200")
        (received,) = tap.upstream.received
        assert received.body == BODY  # with a Content-Length: the trailer is not forwarded
        assert received.headers["content-length"] == str(len(BODY))
        assert not {"x-trailer", "x-one", "x-two", "authorization"} & set(received.headers)
        if path == CHAT:
            assert counted(tap.stats, "0") == 1


async def test_a_streamed_upload_with_a_trailer_ends_with_a_bare_last_chunk() -> None:
    body = b'{"pad": "' + b"x" * 5000 + b'"}'
    async with (
        raw_upstream(lambda _: b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok") as upstream,
        running_tap(upstream_url=upstream.url, proxy_inspect_max_bytes=1024) as tap,
    ):
        raw = await read_all(tap.address, chunked_post(CHAT, body, b"X-Trailer: 1\r\n", pieces=4))
        assert raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"ok")
        sent = upstream.received
        assert sent.endswith(b"\r\n0\r\n\r\n") and b"X-Trailer" not in sent
        assert dechunk(split_response(sent)[1]) == body


async def test_a_request_trailer_over_64_kib_is_a_400() -> None:
    trailer = b"".join(b"X-T%d: %b\r\n" % (i, b"v" * 1000) for i in range(70))
    async with running_tap(lambda _: json_reply({"ok": True})) as tap:
        raw = await read_all(tap.address, chunked_post(CHAT, BODY, trailer))
        assert raw.startswith(b"HTTP/1.1 400")
        assert not tap.upstream.received


# 2. an upstream chunked response with trailers, whole in one read

CHUNKED_WITH_TRAILERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n"
    b"trailer: x-checksum\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nx-checksum: 1\r\n"
    b"x-other: 2\r\n\r\n"
)


@pytest.mark.parametrize("split", [None, 40, len(CHUNKED_WITH_TRAILERS) - 5])
async def test_an_upstream_response_with_trailers_reaches_the_client_however_it_is_read(
    split: int | None,
) -> None:
    answer = (
        CHUNKED_WITH_TRAILERS
        if split is None
        else [CHUNKED_WITH_TRAILERS[:split], CHUNKED_WITH_TRAILERS[split:]]
    )
    async with (
        raw_upstream(lambda _: answer) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(
            tap.address, b"GET /a HTTP/1.1\r\nhost: tap\r\nconnection: close\r\n\r\n"
        )
        head, body = split_response(raw)
        assert head.startswith(b"HTTP/1.1 200")
        assert body == CHUNKED_WITH_TRAILERS.partition(b"\r\n\r\n")[2]  # verbatim, trailers too


async def test_a_rewritten_stream_with_trailers_in_one_read_ends_cleanly() -> None:
    events = b"".join(
        b"%x\r\n%b\r\n" % (len(event), event)
        for event in sse_events(fixture_stream("chat_T0p8_stream_0.sse"))
    )
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + events + b"0\r\nx-checksum: 1\r\n\r\n"
    )
    body = json.dumps({"model": MODEL, "temperature": 0.8, "stream": True, "messages": []}).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: tap\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(body), body)
    )
    async with (
        raw_upstream(lambda _: answer) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(tap.address, request)
        head, wire = split_response(raw)
        assert head.startswith(b"HTTP/1.1 200") and wire.endswith(b"0\r\n\r\n")
        assert dechunk(wire).endswith(b"data: [DONE]\n\n")
        assert b'"choices":[]' not in dechunk(wire)  # the added usage chunk was undone
        (summary,) = [s for s in tap.stats.bucket_summary() if s.requests]
        assert summary.attributed == 1


# 6. an upstream transfer coding other than chunked


@pytest.mark.parametrize(
    "coding",
    [
        b"gzip, chunked",
        b"chunked, gzip",
        b"identity",
        b"chunked, chunked",
        b"chunked\r\nTransfer-Encoding: chunked",
    ],
    ids=["gzip-chunked", "chunked-gzip", "identity", "chunked-twice", "two-fields"],
)
async def test_an_upstream_transfer_coding_but_chunked_is_a_502(coding: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: %b\r\n\r\n5\r\nhello\r\n0\r\n\r\n" % coding
    async with (
        raw_upstream(lambda _: answer) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(tap.address, b"GET /a HTTP/1.1\r\nhost: tap\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 502")
        assert b"hello" not in raw


# 4. a POST is never sent twice; the idle expiry is a setting


async def test_a_written_post_on_a_reused_connection_that_closes_is_a_502_not_a_resend() -> None:
    answers = iter([json_reply({"ok": True}), Reply(drop=True), json_reply({"ok": True})])
    async with running_tap(lambda _: next(answers)) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        request = (
            b"POST %b HTTP/1.1\r\nhost: tap\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%b" % (CHAT.encode(), len(BODY), BODY)
        )
        statuses = []
        for _ in range(2):
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            statuses.append(int(head.split(b" ")[1]))
        writer.close()
        assert statuses == [200, 502]
        assert len(tap.upstream.received) == 2  # vLLM saw the second POST once
        assert tap.upstream.connections == 1


class FakeTransport(RecordingTransport):
    """A recording transport that can close between two looks at it.

    ``closes_after_checks``: is_closing() answers False that many times, then True: the
    connection closes between the pool's look at it and the write (the race with vLLM's
    keep-alive), so the request is never written."""

    def __init__(self, closes_after_checks: int | None = None) -> None:
        super().__init__()
        self._checks_left = closes_after_checks

    def is_closing(self) -> bool:
        if self._checks_left is not None:
            self.closing = self._checks_left <= 0
            self._checks_left -= 1
        return self.closing

    def close(self) -> None:
        super().close()
        self._checks_left = None

    abort = close


async def through_a_stale_connection(
    idle_transport: FakeTransport, method: bytes = b"POST"
) -> tuple[bytes, list[bytes]]:
    """One request whose tap takes a pooled connection (over ``idle_transport``) that vLLM then
    closes before any answer; a new connection goes to a raw upstream. What the client got, and
    what each new upstream connection received."""
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    async with raw_upstream(lambda _: ok) as upstream:
        settings = Settings(vllm_url=upstream.url, proxy_listen="127.0.0.1:0")
        stats = RequestStats(TemperatureBuckets(settings.temperature_buckets), lambda _: 4)
        tap = Tap(tap_config(settings), stats, lambda: frozenset({MODEL}))
        idle = UpstreamConnection(tap.pool.release)
        idle.connection_made(idle_transport)  # type: ignore[arg-type]
        tap.pool.release(idle)
        client_transport = FakeTransport()
        client = ClientConnection(tap)
        client.connection_made(client_transport)  # type: ignore[arg-type]
        client.data_received(
            b"%b %b HTTP/1.1\r\nhost: tap\r\ncontent-length: %d\r\n\r\n%b"
            % (method, CHAT.encode(), len(BODY), BODY)
        )
        idle.connection_lost(None)  # vLLM closed it, no byte of an answer
        await wait_until(lambda: bool(client_transport.data))
        tap.shutdown()
        return bytes(client_transport.data), [bytes(c.data) for c in upstream.connections]


async def test_a_request_never_written_goes_on_a_new_connection() -> None:
    idle = FakeTransport(closes_after_checks=1)  # open for the pool, closed for the write
    answered, sent = await through_a_stale_connection(idle)
    assert not idle.data
    assert answered.startswith(b"HTTP/1.1 200")
    assert len(sent) == 1 and sent[0].startswith(b"POST ") and sent[0].endswith(BODY)


async def test_a_written_post_is_not_resent_but_an_idempotent_request_is() -> None:
    idle = FakeTransport()
    answered, sent = await through_a_stale_connection(idle)
    assert idle.data.endswith(BODY)  # written once, on the stale connection
    assert answered.startswith(b"HTTP/1.1 502") and sent == []
    idle = FakeTransport()
    answered, sent = await through_a_stale_connection(idle, b"PUT")
    assert answered.startswith(b"HTTP/1.1 200") and len(sent) == 1


def test_the_idle_expiry_of_pooled_connections_is_a_setting() -> None:
    settings = Settings(
        vllm_url="http://vllm:8000", proxy_listen="127.0.0.1:0", proxy_upstream_idle_timeout=30
    )
    stats = RequestStats(TemperatureBuckets(settings.temperature_buckets), lambda _: 4)
    assert Tap(tap_config(settings), stats, frozenset).pool.idle_expiry == 30.0
    assert Settings(vllm_url="http://vllm:8000").proxy_upstream_idle_timeout == 4.0
    pool = UpstreamPool(
        Origin.from_url("http://vllm:8000"), 1.0, ssl.create_default_context(), idle_expiry=30.0
    )
    for idle_for, reused in ((29.0, True), (31.0, False)):
        connection = UpstreamConnection(pool.release)
        connection.connection_made(FakeTransport())  # type: ignore[arg-type]
        pool.release(connection)
        connection.idle_since = time.monotonic() - idle_for
        assert (pool.take_idle() is connection) is reused


# 5. bodies in the encodings vLLM accepts


def request_document(**fields: Any) -> str:
    return json.dumps(
        {
            "model": MODEL,
            "temperature": 0.0,
            "messages": [{"role": "user", "content": "héllo"}],
            **fields,
        },
        ensure_ascii=False,
    )


ENCODINGS = {
    "utf-8-bom": lambda text: b"\xef\xbb\xbf" + text.encode(),
    "utf-16": lambda text: text.encode("utf-16"),
    "utf-16-le": lambda text: text.encode("utf-16-le"),
    "utf-16-be": lambda text: text.encode("utf-16-be"),
    "utf-32": lambda text: text.encode("utf-32"),
}
BUCKETS = TemperatureBuckets((0.5, 0.7, 1.0))


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_bodies_in_the_encodings_json_loads_reads_get_their_real_bucket(encoding: str) -> None:
    body = ENCODINGS[encoding](request_document())
    assert json.loads(body)["temperature"] == 0.0  # what vLLM's app decodes
    plan = plan_request(body, BUCKETS, None)
    assert (plan.temperature_bucket, plan.model, plan.body) == ("0", MODEL, body)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_a_stream_not_in_utf8_is_never_rewritten(encoding: str) -> None:
    body = ENCODINGS[encoding](request_document(stream=True))
    plan = plan_request(body, BUCKETS, None)
    assert (plan.temperature_bucket, plan.body, plan.undo_include_usage) == ("0", body, False)


def test_a_utf8_stream_with_a_bom_is_rewritten_after_the_bom() -> None:
    text = request_document(stream=True)
    plan = plan_request(b"\xef\xbb\xbf" + text.encode(), BUCKETS, None)
    assert plan.undo_include_usage
    assert plan.body == b'\xef\xbb\xbf{"stream_options":{"include_usage":true},' + text[1:].encode()
    assert json.loads(plan.body)["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("encoding", ["utf-8-bom", "utf-16"])
async def test_bodies_in_other_encodings_are_counted_in_their_bucket_through_the_tap(
    encoding: str,
) -> None:
    body = ENCODINGS[encoding](request_document())
    async with running_tap(lambda _: json_reply({"ok": True})) as tap:
        request = (
            b"POST %b HTTP/1.1\r\nhost: tap\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%b" % (CHAT.encode(), len(body), body)
        )
        assert (await read_all(tap.address, request)).startswith(b"HTTP/1.1 200")
        assert tap.upstream.received[0].body == body
        assert (counted(tap.stats, "0"), counted(tap.stats, "invalid")) == (1, 0)


# 7. a list of prompts: vLLM sends no per-request metrics, so the stream is not rewritten


@pytest.mark.parametrize(
    ("prompt", "rewritten"),
    [
        (["class Foo:", "def bar"], False),
        ([[100, 100], [100]], False),
        (["class Foo:"], True),
        ([100, 100, 100], True),
        ("class Foo:", True),
    ],
    ids=["strings", "token-lists", "one-string", "token-ids", "string"],
)
def test_a_stream_of_several_prompts_is_not_rewritten(prompt: Any, rewritten: bool) -> None:
    body = json.dumps({"model": MODEL, "prompt": prompt, "stream": True}).encode()
    plan = plan_request(body, BUCKETS, None)
    assert plan.undo_include_usage is rewritten
    assert (plan.body == body) is not rewritten


@pytest.mark.injects_faults  # deselected for the compiled tap: its calls are bound at build time
async def test_a_bug_forwarding_a_complete_request_is_a_502_not_a_stall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: object, **__: object) -> bytes:
        raise RuntimeError("bug")

    monkeypatch.setattr("specdec_exporter.tap.http1.request_head", broken)
    async with running_tap(lambda _: json_reply({"ok": True})) as tap:
        raw = await read_all(tap.address, chunked_post(CHAT, BODY, b""))
        assert raw.startswith(b"HTTP/1.1 502")
        assert not tap.upstream.received

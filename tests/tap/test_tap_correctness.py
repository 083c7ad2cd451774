"""Correctness of the tap's HTTP/1.1 handling against desync, smuggling and framing faults.

Each test drives the real tap over raw sockets; docs/reliability.md lists what each covers.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from tapfakes import (
    MODEL,
    Reply,
    dechunk,
    json_reply,
    post_request,
    raw_upstream,
    read_all,
    replay_vllm,
    running_tap,
    split_response,
    wait_until,
)

pytestmark = pytest.mark.anyio
CHAT = "/v1/chat/completions"
SMALL = json_reply({"ok": True})
GREEDY = json.dumps({"model": MODEL, "temperature": 0.0, "messages": []}).encode()
UPGRADE_HEAD = (
    b"GET /v1/realtime HTTP/1.1\r\nhost: tap\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n"
)
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nhost: tap\r\n\r\n"
OK_2 = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno"


def requests_counted(tap: object) -> int:
    return sum(row.requests for row in tap.stats.bucket_summary())  # type: ignore[attr-defined]


# Pipelining: a refused request never changes the in-flight exchange


async def test_pipelined_upgrade_does_not_turn_the_first_exchange_into_a_tunnel() -> None:
    async with running_tap(replay_vllm) as tap:
        first = post_request(CHAT, GREEDY, close=False)
        later = post_request(CHAT, GREEDY, close=False) * 4
        raw = await read_all(tap.address, first + UPGRADE_HEAD + later)
        assert raw.startswith(b"HTTP/1.1 200") and raw.count(b"HTTP/1.1 ") == 1
        assert b"connection: close" in raw.lower()
        assert len(tap.upstream.received) == 1  # nothing after the first request went upstream
        assert requests_counted(tap) == 1


async def test_garbage_after_a_request_does_not_change_its_response() -> None:
    async with running_tap(lambda _: SMALL) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(b"GET /a HTTP/1.1\r\nhost: tap\r\n\r\n\x00\x01 not http\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        head, body = split_response(raw)
        assert head.startswith(b"HTTP/1.1 200") and body == b'{"ok": true}'
        assert b"connection: close" in head.lower()
        assert len(tap.upstream.received) == 1


# Upgrade: a tunnel only on the upstream's 101


async def test_upgrade_refused_by_upstream_forwards_no_held_bytes() -> None:
    async with (
        raw_upstream(lambda _: OK_2) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(tap.address, UPGRADE_HEAD + SMUGGLED + b"frame bytes")
        assert raw.startswith(b"HTTP/1.1 200") and raw.count(b"HTTP/1.1 ") == 1
        assert split_response(raw)[1] == b"no"
        assert upstream.received.count(b"HTTP/1.1") == 1  # only the Upgrade head itself
        assert b"smuggled" not in upstream.received and b"frame" not in upstream.received


async def test_bytes_after_upgrade_wait_for_the_101() -> None:
    gate = asyncio.Event()
    seen: list[bytes] = []

    def answer(head: bytes) -> bytes:
        seen.append(head)
        gate.set()
        return b""  # answered below, once the test has looked at what arrived

    async with raw_upstream(answer) as upstream, running_tap(upstream_url=upstream.url) as tap:
        _reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(UPGRADE_HEAD + b"early")
        await asyncio.wait_for(gate.wait(), 5)
        await asyncio.sleep(0.1)
        assert bytes(upstream.connections[0].data) == seen[0]  # "early" is held by the tap
        writer.close()


async def test_upgrade_101_opens_the_tunnel_and_keeps_its_head() -> None:
    switching = (
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
        b"connection: Upgrade\r\nsec-websocket-accept: x\r\n\r\n"
    )
    async with (
        raw_upstream(lambda _: switching) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(UPGRADE_HEAD + b"hello")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == switching
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"HELLO"
        writer.write(b"again")
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"AGAIN"
        writer.close()


async def test_101_to_a_request_without_upgrade_is_a_502() -> None:
    switching = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n"
    async with (
        raw_upstream(lambda _: switching) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(tap.address, b"GET /a HTTP/1.1\r\nhost: tap\r\n\r\n" + SMUGGLED)
        assert raw.startswith(b"HTTP/1.1 502")
        assert b"smuggled" not in upstream.received


# CONNECT and transfer codings: answered by the tap, nothing upstream


async def test_connect_is_refused_and_nothing_goes_upstream() -> None:
    async with (
        raw_upstream(lambda _: OK_2) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(
            tap.address, b"CONNECT vllm:8000 HTTP/1.1\r\nhost: vllm:8000\r\n\r\n" + SMUGGLED
        )
        assert raw.startswith(b"HTTP/1.1 501") and raw.count(b"HTTP/1.1 ") == 1
        assert b"connection: close" in raw.lower()
        assert upstream.connections == []


async def test_transfer_coding_other_than_chunked_is_refused() -> None:
    async with (
        raw_upstream(lambda _: OK_2) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(
            tap.address,
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: tap\r\n"
            b"transfer-encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        )
        assert raw.startswith(b"HTTP/1.1 501") and b"connection: close" in raw.lower()
        assert upstream.connections == []


# Malformed request bodies: 400 while nothing was answered, upstream dropped

CHUNKED_HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: tap\r\ntransfer-encoding: chunked\r\n\r\n"
)
MALFORMED_CHUNKS = {
    "size-overflow": b"ffffffffffffffffff1\r\nab\r\n0\r\n\r\n",
    "0x-prefix": b"0x2\r\nab\r\n0\r\n\r\n",
    "bare-lf": b"2\nab\n0\n\n",
    "no-crlf-after-data": b"2\r\nabXX0\r\n\r\n",
    "crlf-in-quoted-extension": b'2;a="x\r\ny"\r\nab\r\n0\r\n\r\n',
}


@pytest.mark.parametrize("body", MALFORMED_CHUNKS.values(), ids=MALFORMED_CHUNKS.keys())
async def test_malformed_chunked_body_gets_400_and_nothing_upstream(body: bytes) -> None:
    async with running_tap(lambda _: SMALL) as tap:
        raw = await read_all(tap.address, CHUNKED_HEAD + body)
        head, error = split_response(raw)
        assert head.startswith(b"HTTP/1.1 400") and b"connection: close" in head.lower()
        assert json.loads(error)["error"]["code"] == 400
        assert tap.upstream.connections == 0


async def test_malformed_body_after_the_head_went_upstream_aborts_it() -> None:
    async with (
        raw_upstream(lambda _: b"") as upstream,
        running_tap(upstream_url=upstream.url, proxy_inspect_max_bytes=16) as tap,
    ):
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(CHUNKED_HEAD + b"40\r\n" + b"x" * 64 + b"\r\n")  # over the cap: streamed
        await wait_until(
            lambda: bool(upstream.connections) and b"x" * 64 in upstream.connections[0].data
        )
        writer.write(b"0x2\r\nab\r\n")
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert raw.startswith(b"HTTP/1.1 400")
        await asyncio.wait_for(upstream.connections[0].closed.wait(), 5)
        assert not upstream.connections[0].data.endswith(b"0\r\n\r\n")  # never completed


async def test_malformed_body_after_the_response_started_only_closes() -> None:
    early = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"
    async with (
        raw_upstream(lambda _: early) as upstream,
        running_tap(upstream_url=upstream.url, proxy_inspect_max_bytes=16) as tap,
    ):
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(CHUNKED_HEAD + b"40\r\n" + b"x" * 64 + b"\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"hello\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(b"0x2\r\nab\r\n")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # no 400 inside the response
        writer.close()
        await asyncio.wait_for(upstream.connections[0].closed.wait(), 5)


async def test_the_400_survives_a_client_that_keeps_sending() -> None:
    """Lingering close: closing with unread bytes would reset the connection, and the reset
    can destroy the 400 before the client reads it."""
    async with running_tap(lambda _: SMALL) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(CHUNKED_HEAD + b"0x2\r\nab\r\n")
        await asyncio.sleep(0.05)  # the tap has answered and closed its side
        for _ in range(64):
            writer.write(b"z" * 65536)  # the rest of a large upload, still on its way
        await asyncio.sleep(0.05)
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert raw.startswith(b"HTTP/1.1 400")


async def test_errors_answering_head_have_no_body() -> None:
    head = b"HEAD /a HTTP/1.1\r\nhost: tap\r\ntransfer-encoding: chunked\r\n\r\n0x2\r\n"
    async with running_tap(lambda _: SMALL) as tap:
        raw = await read_all(tap.address, head)
        assert raw.startswith(b"HTTP/1.1 400") and raw.endswith(b"\r\n\r\n")
    async with running_tap(lambda _: Reply(drop=True)) as tap:
        raw = await read_all(tap.address, b"HEAD /a HTTP/1.1\r\nhost: tap\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 502") and raw.endswith(b"\r\n\r\n")
        assert b"content-length: " in raw.lower()


# Upstream framing: nothing past the end of a response

FIRST = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst"
SECOND = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond"
FIRST_CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n"


async def two_gets(address: tuple[str, int]) -> list[bytes]:
    reader, writer = await asyncio.open_connection(*address)
    answers = []
    try:
        for _ in range(2):
            writer.write(b"GET /a HTTP/1.1\r\nhost: tap\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            if b"chunked" in head.lower():
                body = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
            else:
                body = await asyncio.wait_for(reader.readexactly(5), 5)
            answers.append(head + body)
    finally:
        writer.close()
    return answers


@pytest.mark.parametrize(
    ("first", "surplus"),
    [(FIRST, SECOND), (FIRST_CHUNKED, SECOND), (FIRST, b"\r\n")],
    ids=["length", "chunked", "stray-crlf"],
)
async def test_two_upstream_responses_in_one_write_give_one_clean_response(
    first: bytes, surplus: bytes
) -> None:
    async with (
        raw_upstream(lambda _: first + surplus) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        answers = await two_gets(tap.address)
        for answer in answers:
            head, body = split_response(answer)
            framing = [
                line
                for line in head.lower().split(b"\r\n")
                if line.startswith((b"content-length", b"transfer-encoding"))
            ]
            assert len(framing) == 1
            assert (dechunk(body) if b"chunked" in framing[0] else body) == b"first"
        assert len(upstream.connections) == 2  # the out-of-step connection was not reused


async def test_surplus_in_a_later_upstream_read_cuts_instead_of_forwarding_it() -> None:
    pieces = [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfi", b"rst" + SECOND]
    async with (
        raw_upstream(lambda _: pieces) as upstream,
        running_tap(upstream_url=upstream.url) as tap,
    ):
        raw = await read_all(tap.address, b"GET /a HTTP/1.1\r\nhost: tap\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"\r\n\r\nfi")
        assert b"second" not in raw


# Host


@pytest.mark.parametrize(
    ("request_bytes", "host"),
    [
        (b"GET /a HTTP/1.1\r\nhost: tap.example\r\nconnection: Host, close\r\n\r\n", "tap.example"),
        (b"GET /a HTTP/1.0\r\nconnection: host\r\n\r\n", None),
    ],
    ids=["client-host-nominated", "no-host"],
)
async def test_host_is_always_sent_upstream(request_bytes: bytes, host: str | None) -> None:
    async with running_tap(lambda _: SMALL) as tap:
        raw = await read_all(tap.address, request_bytes)
        assert raw.startswith(b"HTTP/1.1 200")
        expected = host or "{}:{}".format(*tap.upstream_address)
        assert tap.upstream.received[0].headers.get("host") == expected


async def test_two_host_headers_are_refused() -> None:
    async with running_tap(lambda _: SMALL) as tap:
        raw = await read_all(tap.address, b"GET /a HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 400") and tap.upstream.connections == 0


# Protocol versions

VERSIONS = {
    "h2c-preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
    "http2-line": (b"GET /a HTTP/2.0\r\nhost: tap\r\n\r\n", 505),
    "http09-simple": (b"GET /a\r\n\r\n", 505),
    "http09-explicit": (b"GET /a HTTP/0.9\r\nhost: tap\r\n\r\n", 505),
    "http12": (b"GET /a HTTP/1.2\r\nhost: tap\r\n\r\n", 505),
    "no-version": (b"GET /a HTTP/x.y\r\nhost: tap\r\n\r\n", 400),
}


@pytest.mark.parametrize(("request_bytes", "status"), VERSIONS.values(), ids=VERSIONS.keys())
async def test_unsupported_versions_are_refused(request_bytes: bytes, status: int) -> None:
    async with running_tap(lambda _: SMALL) as tap:
        raw = await read_all(tap.address, request_bytes)
        assert raw.startswith(b"HTTP/1.1 %d" % status) and raw.count(b"HTTP/1.1 ") == 1
        assert b"connection: close" in raw.lower()
        assert tap.upstream.connections == 0


# include_usage: a pure byte insertion

INSERTIONS = [
    (
        b'{ "model" : "tiny-llama", "stream":true, "x":"\\u00e9\\/\\"}", "stream_options" : '
        b'{ "foo" : [1, "}"] } , "x": 2}',
        b'"}"] }',
        b'"}"] ,"include_usage":true}',
    ),
    (b'{"stream":true,"stream_options":{}}', b"{}", b'{"include_usage":true}'),
    (
        b'{"stream":true,"stream_options":{"include_usage":false}}',
        b"false}",
        b'false,"include_usage":true}',
    ),
    (
        b'{"stream":true,"stream_options":null ,"n":1}',
        b"null",
        b'null,"stream_options":{"include_usage":true}',
    ),
    (
        b'{"stream_options":{"include_usage":1},"stream":true,"stream_options":{"a":1}}',
        b'{"a":1}',
        b'{"a":1,"include_usage":true}',
    ),
    (b'{"stream":true,"stream\\u005foptions":{}}', b"{}", b'{"include_usage":true}'),
    (b'\n {"stream" :true}', b"{", b'{"stream_options":{"include_usage":true},'),
]


@pytest.mark.parametrize(("body", "old", "new"), INSERTIONS)
async def test_include_usage_is_a_pure_byte_insertion(body: bytes, old: bytes, new: bytes) -> None:
    async with running_tap(replay_vllm) as tap:
        raw = await read_all(tap.address, post_request(CHAT, body))
        assert raw.startswith(b"HTTP/1.1 200")
        sent = tap.upstream.received[0].body
        at = body.rindex(old)
        assert sent == body[:at] + new + body[at + len(old) :]
        assert json.loads(sent)["stream_options"]["include_usage"] is True
        assert b'"usage"' not in dechunk(split_response(raw)[1])  # undone for the client


async def test_include_usage_not_insertable_passes_the_body_unchanged() -> None:
    body = b'{"stream":true,"stream_options":{"continuous_usage_stats":true}}'
    async with running_tap(lambda _: Reply(200, [], [b"{}"])) as tap:
        await read_all(tap.address, post_request(CHAT, body))
        assert tap.upstream.received[0].body == body

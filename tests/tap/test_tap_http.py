"""HTTP/1.1 details through the tap: keep-alive, chunked, Expect, HEAD, 1.0, hop-by-hop,
pipelining, Upgrade, malformed requests, a stale pooled connection."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
from contextlib import suppress

import pytest
from tapfakes import (
    MODEL,
    Received,
    Reply,
    dechunk,
    json_reply,
    post_request,
    raw_exchange,
    replay_vllm,
    running_tap,
    split_response,
    wait_until,
)

from specdec_exporter.tap.exchange import Exchange, Stage

pytestmark = pytest.mark.anyio
CHAT = "/v1/chat/completions"
SMALL = json_reply({"ok": True})


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


async def test_keep_alive_both_sides() -> None:
    async with running_tap(lambda _: SMALL) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        for _ in range(5):
            writer.write(b"GET /health HTTP/1.1\r\nhost: tap\r\n\r\n")
            head, body = await read_response(reader)
            assert head.startswith(b"HTTP/1.1 200") and body == b'{"ok": true}'
        writer.close()
        assert len(tap.upstream.received) == 5
        assert tap.upstream.connections == 1  # one pooled upstream connection reused


async def test_chunked_request_body_is_inspected_and_sent_with_a_length() -> None:
    body = json.dumps({"model": MODEL, "temperature": 0.0, "messages": []}).encode()
    chunked = (
        b"%x\r\n%b\r\n" % (10, body[:10])
        + b"%x\r\n%b\r\n" % (len(body) - 10, body[10:])
        + b"0\r\n\r\n"
    )
    async with running_tap() as tap:
        raw = await raw_exchange(
            tap.address,
            b"POST /v1/chat/completions HTTP/1.1\r\n"
            b"host: tap\r\ntransfer-encoding: chunked\r\n"
            b"connection: close\r\n\r\n" + chunked,
        )
        assert raw.startswith(b"HTTP/1.1 200")
        received = tap.upstream.received[0]
        assert received.body == body
        assert received.headers["content-length"] == str(len(body))
        assert "transfer-encoding" not in received.headers
        assert sum(row.attributed for row in tap.stats.bucket_summary()) == 1


async def test_expect_100_continue() -> None:
    body = b'{"temperature": 0.0}'
    async with running_tap(lambda _: SMALL) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: tap\r\nexpect: 100-continue\r\n"
            b"content-length: %d\r\n\r\n" % len(body)
        )
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        head, answer = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200") and answer == b'{"ok": true}'
        assert "expect" not in tap.upstream.received[0].headers
        writer.close()


async def test_head_has_no_body_and_keeps_the_connection() -> None:
    async with running_tap(lambda _: SMALL) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(b"HEAD /health HTTP/1.1\r\nhost: tap\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"content-length: 12" in head.lower()
        writer.write(b"GET /health HTTP/1.1\r\nhost: tap\r\n\r\n")
        head, body = await read_response(reader)  # the HEAD left no stray body bytes
        assert body == b'{"ok": true}'
        writer.close()


async def test_http10_client_gets_a_plain_body_and_close() -> None:
    body = json.dumps({"model": MODEL, "temperature": 0.8, "stream": True}).encode()
    async with running_tap() as tap:
        raw = await raw_exchange(
            tap.address,
            b"POST /v1/chat/completions HTTP/1.0\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(body), body),
        )
        head, stream = split_response(raw)
        assert b"transfer-encoding" not in head.lower()
        assert b"connection: close" in head.lower()
        assert stream.startswith(b"data: {") and stream.endswith(b"data: [DONE]\n\n")
        assert b'"usage"' not in stream
        host, port = tap.upstream_address
        assert tap.upstream.received[0].headers["host"] == f"{host}:{port}"  # added for 1.1


async def test_hop_by_hop_headers_are_not_forwarded() -> None:
    async with running_tap(lambda _: SMALL) as tap:
        await raw_exchange(
            tap.address,
            b"GET /x HTTP/1.1\r\nhost: tap\r\n"
            b"connection: close, x-hop\r\nx-hop: 1\r\nkeep-alive: timeout=5\r\n"
            b"te: trailers\r\nx-end-to-end: 2\r\n\r\n",
        )
        headers = tap.upstream.received[0].headers
        assert headers["x-end-to-end"] == "2" and headers["host"] == "tap"
        assert not {"x-hop", "keep-alive", "te", "connection"} & set(headers)


async def test_pipelined_request_is_refused_by_closing_after_the_first() -> None:
    async with running_tap(lambda _: SMALL) as tap:
        request = b"GET /a HTTP/1.1\r\nhost: tap\r\n\r\n"
        raw = await raw_exchange(tap.address, request + request)
        assert raw.count(b"HTTP/1.1 200") == 1
        assert b"connection: close" in raw.lower()
        assert len(tap.upstream.received) == 1


async def test_malformed_request_gets_400() -> None:
    async with running_tap(lambda _: SMALL) as tap:
        raw = await raw_exchange(tap.address, b"NOT HTTP AT ALL\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 400")
        assert json.loads(split_response(raw)[1])["error"]["code"] == 400


async def test_stale_pooled_connection_is_retried_once_on_a_new_one() -> None:
    answers = iter([SMALL, Reply(drop=True), SMALL])
    async with running_tap(lambda _: next(answers)) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        for _ in range(2):
            writer.write(b"GET /health HTTP/1.1\r\nhost: tap\r\n\r\n")
            head, _body = await read_response(reader)
            assert head.startswith(b"HTTP/1.1 200")
        writer.close()
        assert len(tap.upstream.received) == 3
        assert tap.upstream.connections == 2


async def test_upstream_error_status_passes_through() -> None:
    error = {
        "error": {"message": "model not found", "type": "NotFoundError", "param": None, "code": 404}
    }
    async with running_tap(lambda _: json_reply(error, status=404)) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, b'{"model": "nope"}'))
        assert raw.startswith(b"HTTP/1.1 404")
        assert json.loads(split_response(raw)[1]) == error


async def test_streamed_response_to_http11_keeps_upstream_chunks() -> None:
    async with running_tap(replay_vllm) as tap:
        body = json.dumps({"model": MODEL, "temperature": 0.0, "stream": True}).encode()
        raw = await raw_exchange(tap.address, post_request(CHAT, body))
        assert dechunk(split_response(raw)[1]).endswith(b"data: [DONE]\n\n")


async def echo_after_101(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n"
    )
    with suppress(ConnectionError):
        while data := await reader.read(1024):
            writer.write(data.upper())
    writer.close()


async def test_upgrade_becomes_a_tunnel() -> None:
    server = await asyncio.start_server(echo_after_101, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with running_tap(upstream_url=f"http://127.0.0.1:{port}") as tap:
            reader, writer = await asyncio.open_connection(*tap.address)
            writer.write(
                b"GET /v1/realtime HTTP/1.1\r\nhost: tap\r\nupgrade: websocket\r\n"
                b"connection: Upgrade\r\n\r\nhello"
            )
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101")
            assert await reader.readexactly(5) == b"HELLO"
            writer.write(b"again")
            assert await reader.readexactly(5) == b"AGAIN"
            writer.close()
    finally:
        server.close()


def test_reply_defaults() -> None:
    assert Reply().status == 200 and Received("GET", "/", {}, b"").body == b""


async def test_slow_client_pauses_reading_from_upstream() -> None:
    """Flow control: a client that does not read makes the tap stop reading vLLM (bounded
    buffers), and everything arrives once it reads."""
    piece = b"data: " + b"x" * 65_530 + b"\n\n"
    reply = Reply(200, [("content-type", "text/event-stream")], [piece] * 256, chunked=True)
    async with running_tap(lambda _: reply) as tap:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect(tap.address)
        reader, writer = await asyncio.open_connection(sock=sock, limit=64 * 1024)
        writer.write(b"GET /stream HTTP/1.1\r\nhost: tap\r\nconnection: close\r\n\r\n")
        await wait_until(
            lambda: any(
                exchange.upstream is not None and exchange.upstream.reading_paused
                for exchange in live_exchanges()
            ),
            timeout=10,
        )
        received = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        assert dechunk(split_response(received)[1]) == piece * 256


def live_exchanges() -> list[Exchange]:
    return [
        item
        for item in gc.get_objects()
        if isinstance(item, Exchange) and item.stage is not Stage.DONE
    ]


async def test_response_head_over_64_kib_is_a_502_but_a_big_first_body_read_is_fine() -> None:
    big_head = Reply(200, [("x-big", "y" * 70_000)], [b"ok"])
    async with running_tap(lambda _: big_head) as tap:
        raw = await raw_exchange(tap.address, b"GET / HTTP/1.1\r\nhost: tap\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 502")
    big_body = Reply(200, [("content-type", "application/json")], [b"z" * 200_000])
    async with running_tap(lambda _: big_body) as tap:
        raw = await raw_exchange(
            tap.address, b"GET / HTTP/1.1\r\nhost: tap\r\nconnection: close\r\n\r\n"
        )
        assert split_response(raw)[1] == b"z" * 200_000

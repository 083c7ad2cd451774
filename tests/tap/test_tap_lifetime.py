"""An ended exchange leaves no reference cycle: its objects are freed by reference counting the
moment it ends, on every way an exchange ends, with the garbage collector off."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
from prometheus_client import CollectorRegistry
from tapfakes import (
    MODEL,
    Received,
    Reply,
    TapUnderTest,
    fixture_stream,
    post_request,
    raw_exchange,
    replay_vllm,
    running_tap,
    sse_reply,
    wait_until,
)
from tapwire import read_reply

from specdec_exporter.tap.downstream import Downstream
from specdec_exporter.tap.exchange import Exchange
from specdec_exporter.tap.inspection import Inspection
from specdec_exporter.tap.request_side import RequestSide
from specdec_exporter.tap.response_side import ResponseSide

pytestmark = pytest.mark.anyio
CHAT = "/v1/chat/completions"
PARTS = (Exchange, RequestSide, ResponseSide, Downstream, Inspection)


def body(**fields: object) -> bytes:
    return json.dumps({"model": MODEL, "messages": [], "temperature": 0.8, **fields}).encode()


def live_parts() -> int:
    """Exchanges and their parts still in memory, garbage included (the collector is off)."""
    return sum(isinstance(thing, PARTS) for thing in gc.get_objects())


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@asynccontextmanager
async def tap_without_gc(handler: Callable[[Received], Reply]) -> AsyncIterator[TapUnderTest]:
    with collector_off():
        async with running_tap(handler) as tap:
            yield tap


def recorded(tap: TapUnderTest) -> int:
    """Requests the tap has recorded: each is recorded once, as its exchange ends."""
    registry = CollectorRegistry()
    tap.stats.register(registry)
    return sum(
        int(sample.value)
        for metric in registry.collect()
        if metric.name == "specdec_requests"
        for sample in metric.samples
        if sample.name == "specdec_requests_total"
    )


@pytest.mark.parametrize(
    "payload",
    [
        body(stream=True),  # rewritten: include_usage added and undone
        body(stream=True, stream_options={"include_usage": True}),  # verbatim
        body(),  # a JSON response
    ],
    ids=["rewrite", "verbatim", "json"],
)
async def test_finished_exchanges_are_freed_at_once(payload: bytes) -> None:
    async with tap_without_gc(replay_vllm) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        for done in range(1, 6):  # keep-alive: one connection, one request after another
            writer.write(post_request(CHAT, payload, close=False))
            reply = await read_reply(reader, b"POST")
            assert reply is not None and reply.status == 200
            await wait_until(lambda done=done: recorded(tap) == done)
            assert live_parts() == 0
        writer.close()


async def test_failed_and_abandoned_exchanges_are_freed_at_once() -> None:
    stream = fixture_stream("chat_T0p8_stream_0.sse")
    replies = iter(
        [
            sse_reply(stream, die_after=5),  # vLLM dies mid-stream: the client is cut
            sse_reply(stream, hold_open=True),  # the client leaves mid-stream
            Reply(status=200, headers=[("content-length", "x")], pieces=[b""]),  # a bad head: 502
        ]
    )
    async with tap_without_gc(lambda _: next(replies)) as tap:
        await raw_exchange(tap.address, post_request(CHAT, body(stream=True)))
        await wait_until(lambda: recorded(tap) == 1)
        assert live_parts() == 0

        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(post_request(CHAT, body(stream=True), close=False))
        await reader.readuntil(b"data: [DONE]")
        writer.close()
        await wait_until(lambda: recorded(tap) == 2)
        assert live_parts() == 0

        raw = await raw_exchange(tap.address, post_request(CHAT, body(stream=True)))
        assert raw.startswith(b"HTTP/1.1 502")
        await wait_until(lambda: recorded(tap) == 3)
        assert live_parts() == 0


async def test_an_exchange_whose_upstream_is_unreachable_is_freed_at_once() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with collector_off():
        async with running_tap(upstream_url=f"http://127.0.0.1:{port}") as tap:
            raw = await raw_exchange(tap.address, post_request(CHAT, body(stream=True)))
            assert raw.startswith(b"HTTP/1.1 502")
            await wait_until(lambda: recorded(tap) == 1)
            assert live_parts() == 0

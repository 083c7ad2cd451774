"""The exchange's parts never point back at it: mid-stream, no part holds the exchange or a part
above its own (the request side holds neither the response side nor the downstream). They hand
back bytes or verdicts, and the exchange acts; so every ending starts in the exchange.

Fake transports, no sockets: the exchange is caught between two reads of vLLM's stream.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from responsewire import CONFIG, MODEL, REQUESTS, STATS, FakeTransport

from specdec_exporter.tap.downstream import Downstream
from specdec_exporter.tap.exchange import Exchange
from specdec_exporter.tap.inspection import Inspection
from specdec_exporter.tap.proxy import ClientConnection, Tap
from specdec_exporter.tap.request_side import RequestSide
from specdec_exporter.tap.response_side import ResponseSide
from specdec_exporter.tap.upstream import UpstreamConnection

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def held_by(thing: object) -> Iterator[object]:
    """What ``thing`` refers to directly: its attributes (through its ``__dict__`` when it has
    one; a compiled class's instance refers to them itself)."""
    for referent in gc.get_referents(thing):
        if isinstance(referent, dict) and referent is getattr(thing, "__dict__", None):
            yield from referent.values()
        else:
            yield referent


@pytest.fixture
def mid_stream() -> Iterator[tuple[Exchange, ClientConnection]]:
    """A rewritten stream (the tap added include_usage) after its head and one event."""
    tap = Tap(CONFIG, STATS, lambda: frozenset({MODEL}))
    upstream = UpstreamConnection(tap.pool.release)
    upstream.connection_made(FakeTransport())  # type: ignore[arg-type]
    tap.pool.release(upstream)
    client = ClientConnection(tap)
    client.connection_made(FakeTransport())  # type: ignore[arg-type]
    client.data_received(REQUESTS["STREAM"])
    upstream.data_received(STREAM_HEAD + chunk(EVENT))
    exchange = client.exchange
    assert exchange is not None and exchange.response.inspection is not None
    yield exchange, client
    upstream.connection_lost(None)


def test_no_part_holds_the_exchange_or_a_part_above_it(
    mid_stream: tuple[Exchange, ClientConnection],
) -> None:
    exchange, _ = mid_stream
    response, inspection = exchange.response, exchange.response.inspection
    above = {
        RequestSide: (Exchange, ResponseSide, Downstream, Inspection),
        ResponseSide: (Exchange,),
        Downstream: (Exchange, RequestSide, ResponseSide, Inspection),
        Inspection: (Exchange, RequestSide, ResponseSide, Downstream),
    }
    for part in (exchange.request, response, exchange.downstream, inspection):
        held = [
            type(thing).__name__ for thing in held_by(part) if isinstance(thing, above[type(part)])
        ]
        assert held == [], f"{type(part).__name__} holds {held}"


def test_the_connections_talk_to_the_exchange_alone(
    mid_stream: tuple[Exchange, ClientConnection],
) -> None:
    """The upstream connection feeds the exchange (not its response side); the client connection
    holds the exchange; the tap lists it among the live ones until it ends."""
    exchange, client = mid_stream
    assert exchange.upstream is not None and exchange.upstream.sink is exchange
    assert client.exchange is exchange
    assert exchange in client.tap.exchanges
    exchange.upstream.data_received(chunk(EVENT) + b"0\r\n\r\n")
    assert exchange.over and client.exchange is None and exchange not in client.tap.exchanges

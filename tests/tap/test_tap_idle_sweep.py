"""The sweep closes client connections idle past CLIENT_IDLE_TIMEOUT, reading only those.

Driven without sockets: connections over a mock transport, their idle clocks set back by hand.
The tests that start an exchange run in an event loop but never yield to it, so the exchange's
connect to vLLM never runs: it stays in flight."""

from __future__ import annotations

import asyncio
from unittest.mock import Mock

import pytest

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.tap_parts import tap_config
from specdec_exporter.tap.proxy import CLIENT_IDLE_TIMEOUT, ClientConnection, Tap
from specdec_exporter.tap.stats import RequestStats

REQUEST = (
    b"POST /v1/models HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
    b"content-length: 2\r\n\r\n{}"
)


def new_tap() -> Tap:
    settings = Settings(vllm_url="http://127.0.0.1:9", proxy_listen="127.0.0.1:0")
    stats = RequestStats(TemperatureBuckets(settings.temperature_buckets), lambda _: None)
    return Tap(tap_config(settings), stats, frozenset)


def connect(tap: Tap) -> tuple[ClientConnection, Mock]:
    """A client connection over a transport that is open and cannot half-close (so closing the
    connection closes the transport)."""
    transport = Mock(spec=asyncio.Transport)
    transport.is_closing.return_value = False
    transport.can_write_eof.return_value = False
    for method in ("write", "close", "abort", "pause_reading", "resume_reading"):
        getattr(transport, method).return_value = None  # the compiled tap checks returned types
    client = ClientConnection(tap)
    client.connection_made(transport)
    return client, transport


def test_only_connections_idle_past_the_timeout_close() -> None:
    tap = new_tap()
    connections = [connect(tap) for _ in range(3)]
    for client, _ in connections[:2]:  # the two oldest: idle for longer than the timeout
        client.idle_since -= CLIENT_IDLE_TIMEOUT + 1
    tap.sweep()
    assert [transport.close.called for _, transport in connections] == [True, True, False]
    assert list(tap.idle_clients) == [connections[2][0]]


@pytest.mark.anyio
async def test_a_connection_with_a_request_in_flight_is_not_idle() -> None:
    tap = new_tap()
    client, transport = connect(tap)
    client.data_received(REQUEST)  # an exchange starts (vLLM is not reachable: it waits)
    assert client.exchange is not None and client not in tap.idle_clients
    client.idle_since -= CLIENT_IDLE_TIMEOUT + 1
    tap.sweep()
    assert not transport.close.called


@pytest.mark.anyio
async def test_a_connection_goes_to_the_back_when_its_exchange_ends() -> None:
    tap = new_tap()
    first, _ = connect(tap)
    second, _ = connect(tap)
    first.data_received(REQUEST)
    assert first.exchange is not None
    first.exchange_done(close=False)
    assert list(tap.idle_clients) == [second, first]


def test_a_closed_connection_leaves_the_idle_set() -> None:
    tap = new_tap()
    client, _ = connect(tap)
    client.connection_lost(None)
    assert not tap.idle_clients and not tap.clients

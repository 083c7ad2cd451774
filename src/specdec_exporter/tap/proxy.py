"""The tap's HTTP/1.1 server: client connections, shared state, and ``run_tap``.

asyncio Protocols and httptools, no framework: response bytes go straight from the upstream
socket to the client (chunked framing kept), and only inspected requests pay for JSON work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import httptools

from specdec_exporter.options import redact_url
from specdec_exporter.tap import http1
from specdec_exporter.tap.config import TapConfig
from specdec_exporter.tap.context import TapContext
from specdec_exporter.tap.exchange import Exchange
from specdec_exporter.tap.http1 import MAX_HEAD_BYTES, Fields, Headers
from specdec_exporter.tap.stats import RequestStats

log = logging.getLogger(__name__)

CLIENT_IDLE_TIMEOUT = 75.0
"""Seconds a keep-alive client connection may sit idle (nginx's default)."""
SWEEP_INTERVAL = 1.0
DRAIN_POLL_INTERVAL = 0.05
LINGER = 2.0
"""Seconds a closing client connection, half-closed, still reads and drops what the client sends,
so the client reads the last response first (nginx's lingering close): a close with unread
bytes resets the connection, and the reset can destroy that response before it is read."""
BACKLOG = 1024
"""Pending connections the tap's listener queues."""
VERSIONS = frozenset({"1.0", "1.1"})
"""Request versions the tap serves; others (HTTP/2 prior knowledge, 0.9) get a 505."""


class Tap(TapContext):
    """What every connection shares: the exchanges' context, the client connections, the live
    exchanges and the sweep that times them out."""

    def __init__(
        self, config: TapConfig, stats: RequestStats, known_models: Callable[[], frozenset[str]]
    ) -> None:
        super().__init__(config, stats, known_models)
        self.clients: set[ClientConnection] = set()
        self.idle_clients: dict[ClientConnection, None] = {}
        """Client connections without an exchange, longest idle first (a dict keeps insertion
        order, and a connection is put back at the end when its exchange ends): the sweep reads
        only the expired ones at the front, not every connection each second."""
        self.exchanges: set[Exchange] = set()
        """Exchanges in flight: each client connection adds its own and takes it out when it
        ends (``ClientConnection.exchange_done``) or when the client goes."""
        self.draining = False
        """Set by ``drain``: a connection closes once its exchange ends (no keep-alive)."""

    def sweep(self) -> None:
        """Time out stalled exchanges and idle client connections."""
        now = time.monotonic()
        for exchange in list(self.exchanges):
            if exchange.idle_for(now) > self.timeout:
                exchange.timed_out()
        expired = []
        for client in self.idle_clients:
            if now - client.idle_since <= CLIENT_IDLE_TIMEOUT:
                break
            expired.append(client)
        for client in expired:
            del self.idle_clients[client]
            client.close()

    def shutdown(self) -> None:
        for client in list(self.clients):
            client.abort()
        self.pool.close_all()


class ClientConnection(asyncio.Protocol):
    """One client connection: parses requests, one exchange at a time (pipelining refused)."""

    def __init__(self, tap: Tap) -> None:
        self.tap = tap
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.exchange: Exchange | None = None
        self.idle_since = time.monotonic()
        self.refused = False
        self._linger: asyncio.TimerHandle | None = None
        self._url = b""
        self._headers: Headers = []
        self._head_bytes = 0

    # asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.tap.clients.add(self)
        self.tap.idle_clients[self] = None

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is not None and exchange.tunneling:
            exchange.tunnel_from_client(data)
            return
        if self.refused:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._upgrade(data[upgrade.args[0] :])
        except httptools.HttpParserError as error:
            self._parse_error(error)

    def _upgrade(self, rest: bytes) -> None:
        """The request just parsed asked for an Upgrade: what follows is not HTTP.

        Only the in-flight request's own Upgrade counts; a refused (pipelined) request never
        changes the state of the in-flight one (a CONNECT was answered and closed already).
        """
        exchange = self.exchange
        if self.refused or exchange is None:
            return
        if not exchange.upgrade:
            self.refused = True
            return
        exchange.hold_for_upgrade(rest)

    def _parse_error(self, error: httptools.HttpParserError) -> None:
        """Unparsable bytes: a 400 (505 for a version), unless they follow a complete request."""
        exchange = self.exchange
        if self.refused:
            return
        if exchange is not None and exchange.request_received:
            self.refused = True  # a broken pipelined request: closed after this response
            return
        # a bad method leaves the parser's method that of the previous request
        method = (
            b""
            if isinstance(error, httptools.HttpParserInvalidMethodError)
            else self.parser.get_method()
        )
        if self.parser.get_http_version() in VERSIONS | {"0.0"}:
            self.reject(400, "malformed HTTP request", method)
        else:
            self.reject(505, "the tap serves HTTP/1.0 and 1.1 only", method)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.tap.clients.discard(self)
        self.tap.idle_clients.pop(self, None)
        if self._linger is not None:
            self._linger.cancel()
        exchange = self._let_go_of_exchange()
        if exchange is not None:
            exchange.client_lost()

    def pause_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client_paused(True)

    def resume_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client_paused(False)

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self.exchange is not None:
            self.refused = True  # a pipelined request: answered by closing after this one
            return
        self._url, self._headers, self._head_bytes = b"", [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.exchange is not None:
            # a trailer field of the request's chunked body (or a header of a refused pipelined
            # request): dropped, never added to the fields the exchange holds; still bounded
            self._count_trailer(len(name) + len(value) + 4)
            return
        self._headers.append((name, value))
        self._count_head(len(name) + len(value) + 4)

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        parser = self.parser
        method = parser.get_method()
        version = parser.get_http_version()  # formats a str: read once
        fields = Fields(self._headers)
        refusal = self._refusal(method, version, fields)
        if refusal is not None:
            self.reject(*refusal, method)
            return
        self.tap.idle_clients.pop(self, None)
        exchange = self.exchange = Exchange(
            self.tap,
            self,
            method,
            self._url,
            fields=fields,
            client_http10=version == "1.0",
            keep_alive=parser.should_keep_alive(),
            upgrade=parser.should_upgrade(),
        )
        self.tap.exchanges.add(exchange)
        exchange.start()

    def _refusal(self, method: bytes, version: str, fields: Fields) -> tuple[int, str] | None:
        """A request the tap answers itself and never forwards: HTTP/2 or 0.9, CONNECT (vLLM
        serves none; a tunnel would carry unparsed bytes), a transfer coding but chunked, and
        two Host headers (RFC 9112 section 3.2: a 400)."""
        if version not in VERSIONS:
            return 505, "the tap serves HTTP/1.0 and 1.1 only"
        if method == b"CONNECT":
            return 501, "the tap does not tunnel CONNECT"
        if fields.tokens(b"transfer-encoding") - {b"chunked"}:
            return 501, "only the chunked transfer coding is supported"
        if fields.count(b"host") > 1:
            return 400, "more than one Host header"
        return None

    def on_body(self, body: bytes) -> None:
        if self.exchange is not None and not self.refused:
            self.exchange.request_body(body)

    def on_message_complete(self) -> None:
        if self.exchange is not None and not self.refused:
            self.exchange.request_complete()

    # used by the exchange

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing() and self._linger is None:
            self.transport.write(data)

    def exchange_done(self, close: bool) -> None:
        self._let_go_of_exchange()
        self.idle_since = time.monotonic()
        if close or self.refused or self.tap.draining:
            self.close()
        elif self.transport is not None:
            self.tap.idle_clients[self] = None  # at the end: the most recently idle
            self.transport.resume_reading()

    def reject(self, status: int, message: str, method: bytes) -> None:
        """Answer a request the tap will not serve with an error, and close.

        A broken body drops its request upstream (aborting vLLM's connection if the head went
        out). The error is written only while no response byte has reached the client: after
        that it would corrupt the response under way, so the connection is only closed.
        """
        exchange = self._let_go_of_exchange()
        answered = exchange is not None and exchange.answered
        if exchange is not None:
            exchange.client_lost()
        if not answered:  # no body in the answer to a HEAD
            self.write(http1.error_response(status, message, head=method == b"HEAD"))
        self.close()

    def _let_go_of_exchange(self) -> Exchange | None:
        """The exchange in flight ends (or ended): out of the tap's live ones, and let go of."""
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            self.tap.exchanges.discard(exchange)
        return exchange

    def pause_reading(self, paused: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if paused:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def close(self) -> None:
        """Half-close after what was written, then close once the client does (or LINGER)."""
        self.refused = True
        transport = self.transport
        if transport is None or transport.is_closing() or self._linger is not None:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.resume_reading()
        transport.write_eof()
        self._linger = asyncio.get_running_loop().call_later(LINGER, transport.close)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES and self.exchange is None:
            raise ValueError("request head too large")  # turned into a 400 by httptools

    def _count_trailer(self, size: int) -> None:
        """A request's trailer fields count towards its head's 64 KiB (a 400 past it)."""
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError("request trailer too large")  # a parser error: 400 or a close


async def run_tap(
    config: TapConfig,
    stats: RequestStats,
    known_models: Callable[[], frozenset[str]],
    on_started: Callable[[tuple[str, int]], None] | None = None,
    *,
    draining: asyncio.Event | None = None,
    listener: socket.socket | None = None,
) -> None:
    """Serve the tap on ``listener`` (bound already), else on ``config.listen``, until cancelled,
    or until ``draining`` is set: then drain (see ``drain``) and return."""
    tap = Tap(config, stats, known_models)
    loop = asyncio.get_running_loop()
    if listener is not None:
        server = await loop.create_server(
            lambda: ClientConnection(tap), sock=listener, backlog=BACKLOG
        )
    else:
        host, port = config.listen
        server = await loop.create_server(
            lambda: ClientConnection(tap), host, port, reuse_address=True, backlog=BACKLOG
        )
    sockets: Any = getattr(server, "sockets")  # noqa: B009  uvloop: a list; typeshed: a tuple
    bound: Any = sockets[0].getsockname()  # (a compiled tap checks the declared type)
    log.info(
        "tap listening on %s:%d, forwarding to %s", bound[0], bound[1], redact_url(config.vllm_url)
    )
    if on_started is not None:
        on_started((bound[0], bound[1]))
    stop = draining if draining is not None else asyncio.Event()
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(SWEEP_INTERVAL, config.timeout / 4))
            tap.sweep()
        await drain(tap, server, config.shutdown_grace)
    finally:
        server.close()
        tap.shutdown()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1.0)


async def drain(tap: Tap, server: asyncio.AbstractServer, grace: float) -> None:
    """Close the listener and idle connections, then give in-flight exchanges up to ``grace``
    seconds to finish (each connection closes once its response is written); the caller aborts
    whatever is left."""
    server.close()
    tap.draining = True
    for client in list(tap.clients):
        if client.exchange is None:
            client.close()
    in_flight = len(tap.exchanges)
    log.info("tap draining", extra={"in_flight": in_flight, "grace_seconds": grace})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while tap.clients and loop.time() < deadline:
        await asyncio.sleep(DRAIN_POLL_INTERVAL)
    log.info("tap drained", extra={"in_flight": in_flight, "unfinished": len(tap.exchanges)})

"""Keep-alive connections to vLLM: one asyncio Protocol per connection, a LIFO pool of idle ones."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_IDLE = 256


class ResponseSink:
    """What an upstream connection feeds: the exchange using it.

    A base class (``exchange.Exchange`` extends it), not a Protocol: compiled by
    mypyc, ``feed_response`` on a Protocol is a generic Python method call (a lookup by name,
    then argument parsing) once per chunk; on a class it is a direct C call.
    """

    def feed_response(self, data: bytes) -> None:
        raise NotImplementedError

    def upstream_lost(self) -> None:
        raise NotImplementedError

    def upstream_paused(self, paused: bool) -> None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Origin:
    """Where vLLM listens, from ``--vllm-url``."""

    host: str
    port: int
    tls: bool
    path_prefix: bytes
    authority: bytes
    """``host:port`` as a Host header value (an IPv6 address in brackets)."""

    @classmethod
    def from_url(cls, url: str) -> Origin:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if tls else 80)
        bracketed = f"[{host}]" if ":" in host else host
        return cls(
            host=host,
            port=port,
            tls=tls,
            path_prefix=parts.path.rstrip("/").encode(),
            authority=f"{bracketed}:{port}".encode(),
        )


class UpstreamConnection(asyncio.Protocol):
    """One connection to vLLM; hands every byte it reads to the exchange using it."""

    def __init__(self, release: Callable[[UpstreamConnection], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.sink: ResponseSink | None = None
        self.reused = False
        self.written = False
        """A byte of the current request reached the transport: vLLM may have acted on it."""
        self.closed = False
        self.idle_since = time.monotonic()
        self._release = release
        self.reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        if sink is None:  # bytes while idle: the connection is out of step, drop it
            self.close()
            return
        sink.feed_response(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.upstream_lost()

    def pause_writing(self) -> None:
        if self.sink is not None:
            self.sink.upstream_paused(True)

    def resume_writing(self) -> None:
        if self.sink is not None:
            self.sink.upstream_paused(False)

    def write(self, data: bytes) -> None:
        """Once or a few times a request (and per read of an upload or a tunnel): never per
        response chunk. A closing transport drops the bytes, so they count as not written."""
        transport = self.transport
        if transport is not None and not self.closed and not transport.is_closing():
            transport.write(data)
            self.written = True

    def pause_reading(self, paused: bool) -> None:
        if self.transport is None or self.closed or paused == self.reading_paused:
            return
        self.reading_paused = paused
        if paused:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def done(self, reusable: bool) -> None:
        """The exchange is over: back to the pool if the connection can carry another request."""
        self.sink = None
        self.pause_reading(False)
        if reusable and not self.closed:
            self._release(self)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once: vLLM sees the client go and aborts the request."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class UpstreamPool:
    """Idle keep-alive connections, newest first; new ones opened on demand."""

    def __init__(
        self, origin: Origin, connect_timeout: float, tls: ssl.SSLContext, idle_expiry: float
    ) -> None:
        """``tls``: how an ``https://`` vLLM is trusted (unused for ``http://``)."""
        self.origin = origin
        self.connect_timeout = connect_timeout
        self.idle_expiry = idle_expiry
        """Seconds an idle connection is reused (``--proxy-upstream-idle-timeout``): under the
        keep-alive of vLLM (uvicorn's 5 s) and of anything in between, so that vLLM never
        closes a connection just as the tap sends a request on it."""
        self._idle: list[UpstreamConnection] = []
        self._ssl = tls if origin.tls else None

    def take_idle(self) -> UpstreamConnection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            transport = connection.transport
            if (
                not connection.closed
                and transport is not None
                and not transport.is_closing()
                and now - connection.idle_since < self.idle_expiry
            ):
                connection.reused = True
                connection.written = False
                return connection
            connection.close()
        return None

    async def connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(
                lambda: UpstreamConnection(self.release),
                self.origin.host,
                self.origin.port,
                ssl=self._ssl,
            ),
            self.connect_timeout,
        )
        return connection

    def release(self, connection: UpstreamConnection) -> None:
        if len(self._idle) >= MAX_IDLE:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def close_all(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

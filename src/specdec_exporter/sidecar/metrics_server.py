"""uvicorn serving the sidecar's app on a socket bound before it (``sidecar/listeners``), its
signals left to the supervisor, behind a door that no client can hold shut.

uvicorn waits for a request's head as long as a client likes, and accepts every connection
it is offered: a thousand half-sent heads hold every file descriptor of the process, and the
poller then cannot open its connection to vLLM (issue 26, section 5). So the metrics listener
accepts itself (``_Door``), and:

- a connection has ``head_timeout`` seconds to complete each request's head, from the moment
  it opens or its previous response ends (idle keep-alive connections are still closed by
  uvicorn's own 5 s keep-alive timeout);
- at most ``max_connections`` are open; beyond that, and whenever fewer than ``fd_reserve``
  descriptors are left to the process, the oldest connection still waiting for its head is
  closed to make room, or, if every connection is being answered, new ones wait in the
  kernel's backlog (they hold no descriptor of ours there). The poller and the tap keep the
  descriptors the metrics listener leaves.

uvicorn (0.54) has nothing for this: ``limit_concurrency`` answers 503 to a request over the
limit, after accepting its connection and reading its head, so it bounds neither descriptors nor
heads; ``timeout_keep_alive`` runs only between requests, and any byte of the next one cancels
it. The protocol is uvicorn's own httptools one (``http=``, uvicorn's documented extension
point), with three of its callbacks extended; the accept loop is asyncio's
``sock_accept``/``connect_accepted_socket``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from specdec_exporter.logs import RateLimiter
from specdec_exporter.sidecar.listeners import free_descriptors
from specdec_exporter.sidecar.supervisor import STOP_TIMEOUT

log = logging.getLogger("specdec_exporter")

RETRY_SECONDS = 0.5
"""How soon the door looks again when descriptors, not its own connections, are short."""
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class MetricsServer(uvicorn.Server):
    """uvicorn on a socket ``serve`` bound first (a taken port is one line there, where uvicorn
    would log and ``sys.exit``); signals are left to the supervisor. Run as ``serve([socket])``."""

    def __init__(
        self,
        app: Any,
        on_started: Callable[[tuple[str, int]], None],
        *,
        head_timeout: float,
        max_connections: int,
        fd_reserve: int,
    ) -> None:
        super().__init__(
            uvicorn.Config(
                app,
                log_config=None,
                access_log=False,
                lifespan="off",
                http=_HeadTimedProtocol,
                timeout_graceful_shutdown=STOP_TIMEOUT,
            )
        )
        self._on_started = on_started
        self.door = _Door(head_timeout, max_connections, fd_reserve)
        self._accepting: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup([])  # uvicorn's state, no asyncio server: the door accepts
        if not sockets or self.should_exit:
            return
        listener = sockets[0]
        listener.listen(self.config.backlog)
        listener.setblocking(False)
        self._accepting = asyncio.create_task(self.door.accept(listener, self._new_protocol))
        host, port = listener.getsockname()[:2]
        self._on_started((host, port))

    def _new_protocol(self) -> _HeadTimedProtocol:
        return _HeadTimedProtocol(
            config=self.config,
            server_state=self.server_state,
            app_state=self.lifespan.state,
            door=self.door,
        )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        await super().shutdown(sockets)

    def stop(self) -> None:
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _HeadTimedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closed when a request's head takes over the door's
    ``head_timeout`` (counted from the connection's start or its previous response's end)."""

    def __init__(self, *args: Any, door: _Door, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._door = door
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._door.opened(self)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        self._door.closed(self)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._head_arrived()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._await_head()

    def _await_head(self) -> None:
        self._head_arrived()
        self._head_timer = self.loop.call_later(self._door.head_timeout, self._head_timed_out)
        self._door.waiting[self] = None

    def _head_timed_out(self) -> None:
        self._door.note(f"its request head did not come in {self._door.head_timeout:g} s")
        self.close_waiting()

    def _head_arrived(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._door.waiting.pop(self, None)

    def close_waiting(self) -> None:
        """Close this connection, which is waiting for a request's head."""
        self._head_arrived()
        if not self.transport.is_closing():
            self.transport.close()


class _Door:
    """The metrics listener's accept loop and the connections it let in."""

    def __init__(self, head_timeout: float, max_connections: int, fd_reserve: int) -> None:
        self.head_timeout = head_timeout
        self.max_connections = max_connections
        self.fd_reserve = fd_reserve
        self.open: set[_HeadTimedProtocol] = set()
        self.waiting: dict[_HeadTimedProtocol, None] = {}
        """Connections waiting for a head, oldest first (insertion order)."""
        self._changed = asyncio.Event()
        self._limiter = RateLimiter(60.0)

    def opened(self, protocol: _HeadTimedProtocol) -> None:
        self.open.add(protocol)

    def closed(self, protocol: _HeadTimedProtocol) -> None:
        self.open.discard(protocol)
        self._changed.set()

    def short_of(self) -> str | None:
        """Why no connection can be let in now: its own limit, or descriptors; None if one can."""
        if len(self.open) >= self.max_connections:
            return "connections"
        free = free_descriptors()
        if free is not None and free <= self.fd_reserve:
            return "descriptors"
        return None

    async def accept(
        self, listener: socket.socket, protocol: Callable[[], _HeadTimedProtocol]
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._make_room()
            try:
                connection, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    continue  # that client is gone (ECONNABORTED, ...)
                self._warn("descriptors", str(exc))
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                await loop.connect_accepted_socket(protocol, connection)
            except OSError:
                connection.close()

    async def _make_room(self) -> None:
        while (short := self.short_of()) is not None:
            oldest = next(iter(self.waiting), None)
            self._changed.clear()
            if oldest is not None:
                self.note(f"short of {short}, the oldest connection still sending its head")
                oldest.close_waiting()
            else:
                self._warn(short, "every connection is being answered")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), RETRY_SECONDS)

    def note(self, why: str) -> None:
        """One line per reason and minute for the connections the door closes."""
        emit, suppressed = self._limiter.allow(why)
        if emit:
            log.warning(
                "closed a connection of the metrics listener: %s",
                why,
                extra={"component": "metrics", "suppressed": suppressed},
            )

    def _warn(self, short: str, detail: str) -> None:
        emit, suppressed = self._limiter.allow(short)
        if emit:
            log.warning(
                "metrics listener short of %s, not accepting: %s",
                short,
                detail,
                extra={"component": "metrics", "suppressed": suppressed},
            )

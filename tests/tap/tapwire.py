"""Wire-level helpers for the tap's property tests: an upstream that parses with h11 (the
reference HTTP/1.1 parser), a raw response reader, and taps kept running across examples."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass, field
from typing import Any

import h11
from tapfakes import TapUnderTest, running_tap

Header = tuple[bytes, bytes]


@dataclass
class Forwarded:
    """A request as the upstream's h11 parser read it from the tap."""

    method: bytes
    target: bytes
    headers: list[Header]
    body: bytearray = field(default_factory=bytearray)


@dataclass
class Answer:
    """The upstream's raw reply: pieces written as separate sends, then maybe a close."""

    pieces: list[bytes]
    close: bool = False


Responder = Callable[[Forwarded], Answer]


def ok_answer(request: Forwarded) -> Answer:
    body = b"" if request.method == b"HEAD" else b"ok"
    return Answer([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n" + body])


class H11Upstream:
    """Parses what the tap sends with h11 and answers with scripted raw bytes.

    An h11 error means the tap sent bytes no strict HTTP/1.1 server accepts: kept in
    ``errors`` (the tests assert there are none).
    """

    def __init__(self) -> None:
        self.responder: Responder = ok_answer
        self.forwarded: list[Forwarded] = []
        self.raw_bytes = 0
        self.errors: list[str] = []
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._requests(reader, writer)
        except h11.RemoteProtocolError as error:
            self.errors.append(str(error))
        except ConnectionError:
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        current: Forwarded | None = None
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data:
                    return
                self.raw_bytes += len(data)
                connection.receive_data(data)
            elif isinstance(event, h11.Request):
                current = Forwarded(event.method, event.target, list(event.headers.raw_items()))
            elif isinstance(event, h11.Data) and current is not None:
                current.body += event.data
            elif isinstance(event, h11.EndOfMessage) and current is not None:
                self.forwarded.append(current)
                if not await self._answer(connection, writer, self.responder(current)):
                    return
                current = None

    async def _answer(
        self, connection: h11.Connection, writer: asyncio.StreamWriter, answer: Answer
    ) -> bool:
        for index, piece in enumerate(answer.pieces):
            if index:
                await writer.drain()
                await asyncio.sleep(0)
            writer.write(piece)
        await writer.drain()
        connection.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
        connection.send(h11.EndOfMessage())
        if answer.close or connection.our_state is not h11.DONE:
            return False
        connection.start_next_cycle()
        return True


@dataclass
class Reply:
    """One response as the client read it from the tap."""

    status: int
    head: bytes
    wire_body: bytes
    body: bytes


async def read_reply(reader: asyncio.StreamReader, method: bytes) -> Reply | None:
    """The next final response (1xx skipped), or None at a clean EOF."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as partial:
            assert partial.partial == b"", partial.partial
            return None
        status = int(head.split(b" ", 2)[1])
        if status >= 200:
            break
    headers = head.lower()
    if method == b"HEAD" or status in (204, 304):
        return Reply(status, head, b"", b"")
    if b"\r\ntransfer-encoding: chunked" in headers:
        wire, body = await read_chunked(reader)
        return Reply(status, head, wire, body)
    for line in headers.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            body = await reader.readexactly(int(line.split(b":")[1]))
            return Reply(status, head, body, body)
    body = await reader.read()
    return Reply(status, head, body, body)


async def read_chunked(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    wire, body = bytearray(), bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        wire += line
        size = int(line.split(b";")[0], 16)
        if size == 0:
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                wire += trailer
            wire += b"\r\n"
            return bytes(wire), bytes(body)
        data = await reader.readexactly(size + 2)
        wire += data
        body += data[:-2]


class Harness:
    """One event loop, one h11 upstream and taps on it, kept across Hypothesis examples."""

    def __init__(self, **taps: dict[str, Any]) -> None:
        self.loop = asyncio.new_event_loop()
        self.upstream = H11Upstream()
        self.taps: dict[str, TapUnderTest] = {}
        self._settings = taps
        self._contexts: list[AbstractAsyncContextManager[TapUnderTest]] = []

    def run(self, coroutine: Any, timeout: float = 20.0) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, timeout))

    async def start(self) -> None:
        await self.upstream.start()
        for name, settings in self._settings.items():
            context = running_tap(upstream_url=self.upstream.url, **settings)
            self._contexts.append(context)
            self.taps[name] = await context.__aenter__()

    async def stop(self) -> None:
        for context in reversed(self._contexts):
            await context.__aexit__(None, None, None)
        await self.upstream.stop()

    def close(self) -> None:
        self.run(self.stop())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

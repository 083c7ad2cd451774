"""Towards the client: the response head and body framed for the client connection, queued and
written once per read from vLLM, and the tap's own error replies (``upstream`` is the other way).

The hot path: ``body`` once per body piece, ``flush`` once per read from vLLM.
"""

from __future__ import annotations

import time
from typing import Final, Protocol

from specdec_exporter.tap import http1
from specdec_exporter.tap.http1 import CRLF, LAST_CHUNK, Fields, Framing, chunk_size_line

RAW: Final = Framing.RAW
CHUNKED: Final = Framing.CHUNKED
UNTIL_CLOSE: Final = Framing.UNTIL_CLOSE
"""As ``Final`` globals for the per-chunk path: a member lookup such as ``Framing.RAW`` goes through
Python 3.11's ``EnumType.__getattr__`` hook, ten times the cost of a global, and compiled, a
``Final`` global is a C static rather than a module-dict lookup."""


class Client(Protocol):
    """The client connection an exchange answers (``proxy.ClientConnection``)."""

    @property
    def refused(self) -> bool:
        """A pipelined or broken request followed: the connection closes after this response."""
        ...

    def write(self, data: bytes) -> None: ...

    def pause_reading(self, paused: bool) -> None: ...

    def exchange_done(self, close: bool) -> None:
        """The exchange is over; ``close``: close the connection after what was written."""
        ...


class Downstream:
    """What goes to the client of one exchange, in order: one head, then the body as
    ``framing`` says; queued, and written by ``flush`` in one write per read from vLLM."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.framing = RAW
        """How the body goes to the client: verbatim, re-chunked, or unframed until close."""
        self.head_written = False
        """A response head (or tunnel bytes) has gone to the client, or is queued."""
        self.first_body_at: float | None = None
        """When the first body byte was queued (a stream's time to first token)."""
        self._out: list[bytes] = []

    def head(self, status: int, reason: bytes, fields: Fields, close: bool) -> None:
        """Queue the response head, with the framing fields of ``framing``: it goes out with the
        first body bytes, in one write."""
        if self.head_written:
            return
        self.head_written = True
        self._out.append(http1.response_head(status, reason, fields, self.framing, close))

    def verbatim_head(self, head: bytes) -> None:
        """Queue a head as vLLM sent it (the 101 that opens a tunnel)."""
        self.head_written = True
        self._out.append(head)

    def body(self, data: bytes) -> None:
        """Queue body bytes, framed: a chunk of their own when re-chunking (three pieces, joined
        once by ``flush``: no formatting a chunk), else as they are."""
        if not data:
            return
        if self.first_body_at is None:
            self.first_body_at = time.monotonic()
        out = self._out
        if self.framing is CHUNKED:
            out.append(chunk_size_line(len(data)))
            out.append(data)
            out.append(CRLF)
        else:
            out.append(data)

    def end(self, rest: bytes) -> None:
        """The body is complete: ``rest`` (what a rewrite still held), then its end."""
        self.body(rest)
        if self.framing is CHUNKED:
            if self.first_body_at is None:
                self.first_body_at = time.monotonic()
            self._out.append(LAST_CHUNK)

    def flush(self) -> None:
        """Write what is queued, in one write."""
        out = self._out
        if not out:
            return
        self.client.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def error(self, status: int, message: str, head_only: bool) -> None:
        """What is queued, then an error reply if no response head has gone out yet;
        ``head_only``: the answer to a HEAD, without its body."""
        self.flush()
        if not self.head_written:
            self.head_written = True
            self.client.write(http1.error_response(status, message, head=head_only))

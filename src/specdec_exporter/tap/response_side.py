"""The response side of an exchange: vLLM's bytes through the response parser's callbacks, the
framing towards the client, inspection for per-request metrics, and the writes to the client.

The hot path: ``feed_response`` once per upstream read, one client write per read.
"""

from __future__ import annotations

import contextlib
import time
from typing import Final

import httptools

from specdec_exporter.core.buckets import UNKNOWN_LABEL
from specdec_exporter.tap import http1
from specdec_exporter.tap.contracts import ClientSide, Endings, TapContext
from specdec_exporter.tap.http1 import (
    CRLF,
    MAX_HEAD_BYTES,
    NO_FIELDS,
    Fields,
    Framing,
    Headers,
    chunk_size_line,
)
from specdec_exporter.tap.request_side import RequestSide
from specdec_exporter.tap.spec import (
    SpecDecodeSummary,
    completion_tokens_of,
    summary_from_chunk,
    summary_from_response_tail,
)
from specdec_exporter.tap.sse import IncludeUsageUndo, UsageWatcher
from specdec_exporter.tap.upstream import ResponseSink

RAW: Final = Framing.RAW
CHUNKED: Final = Framing.CHUNKED
UNTIL_CLOSE: Final = Framing.UNTIL_CLOSE
"""As ``Final`` globals for the per-chunk path: a member lookup such as ``Framing.RAW`` goes through
Python 3.11's ``EnumType.__getattr__`` hook, ten times the cost of a global, and compiled, a
``Final`` global is a C static rather than a module-dict lookup."""

Outcome = tuple[SpecDecodeSummary | None, float | None, float | None]
"""What a response showed: its per-request metrics, time to first token, time per output token."""


SPENT_PARSER = httptools.HttpResponseParser(None)
"""What an ended response side holds instead of its parser, whose callbacks point back at it (a
reference cycle). Never fed: the upstream connection lets go of the side first."""


class SurplusResponseError(Exception):
    """vLLM sent bytes past the end of the response: raised to stop the response parser."""


class ResponseSide(ResponseSink):
    """vLLM's answer to ``request``; the response parser's callbacks are its methods."""

    def __init__(
        self, tap: TapContext, client: ClientSide, owner: Endings, request: RequestSide
    ) -> None:
        self.tap = tap
        self.client = client
        self.owner = owner
        self.request = request
        self.parser = httptools.HttpResponseParser(self)
        self.reads = 0
        """vLLM's reads so far: counted, not timed (the sweep dates them; no clock read a chunk)."""
        self.tunnel_open = False
        """vLLM answered 101: its bytes go to the client as they come."""
        self.head_done = False
        self.head_written = False
        """A response head (or tunnel bytes) has gone to the client."""
        self.until_close = False
        """The body has no length: it ends when vLLM closes the connection."""
        self.close_client = False
        self.started = False
        """vLLM has begun an answer (no retry from here on)."""
        self._status = 0
        self._reason = b""
        self._response_headers: Headers = []
        self._fields = NO_FIELDS
        self._head_buffer = b""
        self._head_size = 0
        self._interim = False
        self._framing = RAW
        self._upstream_keep_alive = False
        self._out: list[bytes] = []
        self._response_done = False
        self._no_body = False
        self._surplus = False
        self._watcher: UsageWatcher | None = None
        self._undo: IncludeUsageUndo | None = None
        self._tail: bytearray | None = None
        self._first_body_at: float | None = None
        self._final_chunk_at: float | None = None

    # fed by the upstream connection (upstream.ResponseSink)

    def feed_response(self, data: bytes) -> None:
        self.reads += 1
        if self.tunnel_open:
            self.client.write(data)
            return
        head_pending = not self.head_done
        if head_pending:
            self._head_buffer += data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the 101 answering an Upgrade request: what follows is the tunnel's
        except httptools.HttpParserError:
            if not self._response_done:
                self.owner.fail(502, "vLLM sent an invalid HTTP response")
                return
            if not head_pending and self._framing is RAW:
                self._cut_surplus()  # its end is somewhere in this read: cannot be placed
                return
            self._surplus = True  # bytes after the end of the response: dropped
        if head_pending:
            if self.head_done:
                self._head_read_done()
            elif len(self._head_buffer) > MAX_HEAD_BYTES:
                self.owner.fail(502, "vLLM sent a response head over 64 KiB")
                return
        elif self._framing is RAW:  # _write_body(), inline: vLLM's bytes verbatim
            if self._first_body_at is None:
                self._first_body_at = time.monotonic()
            self._out.append(data)
        out = self._out
        if out:  # flush(), inline: once per read
            self.client.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        if self._response_done:
            self.owner.finish()

    def upstream_lost(self) -> None:
        self.owner.upstream_lost()

    def upstream_paused(self, paused: bool) -> None:
        self.client.pause_reading(paused)

    def _head_read_done(self) -> None:
        """The read that completed the response head: relay it and the body bytes it carried."""
        if self.tunnel_open:
            self._open_tunnel()
        elif self._framing is RAW:
            body_start = self._head_buffer.find(http1.HEAD_END) + len(http1.HEAD_END)
            self._write_head()
            self._write_body(self._raw_body(self._head_buffer[body_start:]))
        self._head_buffer = b""

    def _raw_body(self, after_head: bytes) -> bytes:
        """The body bytes of the first read, without anything past the end of the response."""
        if self._no_body:
            self._surplus = self._surplus or bool(after_head)
            return b""
        if not self._fields.chunked():  # the end is at Content-Length
            length = self._fields.content_length() or 0
            if len(after_head) > length:  # also a stray CRLF, which the parser skips silently
                self._surplus = True
                return after_head[:length]
            return after_head
        if not self._surplus:
            return after_head
        body = body_of(self._head_buffer)  # rare: re-read the response alone, then re-frame
        return (http1.chunk(body) if body else b"") + http1.LAST_CHUNK

    def _cut_surplus(self) -> None:
        """Surplus in a later read of a verbatim body: the client connection is cut."""
        self.tap.warn("surplus", "vLLM sent bytes past the end of a response; connection cut")
        self.owner.cut()

    def drop_parser(self) -> None:
        """The exchange is over: the parser, whose callbacks are this side's methods, goes."""
        self.parser = SPENT_PARSER

    def forget_head(self) -> None:
        """The connection closed before any answer: the request goes again, on a new one."""
        self._head_buffer = b""

    # the response parser's callbacks

    def on_message_begin(self) -> None:
        if self._response_done:
            raise SurplusResponseError  # a second response in the same read: stop parsing here
        self.started = True
        self.request.request_bytes = None  # an answer has begun: no retry from here on
        self._reason = b""  # a final response after a 1xx has its own

    def on_status(self, reason: bytes) -> None:
        self._reason += reason  # in pieces when the status line spans two reads

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:
            return  # a trailer field: relayed in verbatim bytes, never added to the head's fields
        self._response_headers.append((name, value))
        self._head_size += len(name) + len(value) + 4
        if self._head_size > MAX_HEAD_BYTES:
            raise ValueError("response head too large")  # a parser error: 502

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status == 101:
            self._switch_protocols()
            return
        if status < 200:
            self._interim = True  # 1xx: not passed on (the tap answered Expect itself)
            return
        request = self.request
        self._status = status
        self.head_done = True
        request.decline_upgrade()  # a 101 aside, vLLM answered the request itself
        self._upstream_keep_alive = self.parser.should_keep_alive()
        fields = self._fields = Fields(self._response_headers)
        if b"transfer-encoding" in fields.names:
            self._check_transfer_coding(fields)
        chunked = fields.chunked()
        no_body = self._no_body = request.method == b"HEAD" or status in (204, 304)
        self.until_close = not no_body and not chunked and fields.content_length() is None
        self._set_up_inspection(status, fields)
        self._framing = self._choose_framing(chunked, no_body)
        self.close_client = (
            not request.client_keep_alive
            or self.until_close
            or self._framing is UNTIL_CLOSE
            or request.upgrade
            or not request.complete
            or self.client.refused
        )
        if self._framing is not RAW:
            self._write_head()
        if no_body:
            self._response_done = True

    def _check_transfer_coding(self, fields: Fields) -> None:
        """``Transfer-Encoding`` must be one field saying ``chunked``: any other coding, or
        ``chunked`` twice (a head relayed verbatim would carry both), is a parser error, so a
        502, as nginx answers both."""
        value = fields.value(b"transfer-encoding") or b""
        if value.strip().lower() != b"chunked" or fields.count(b"transfer-encoding") != 1:
            self.tap.warn("transfer-coding", "vLLM sent a transfer coding but chunked: 502")
            raise ValueError("unknown transfer coding")

    def _switch_protocols(self) -> None:
        """vLLM answered 101: only valid for a request that asked for an Upgrade."""
        if not self.request.upgrade:
            raise ValueError("101 to a request without Upgrade")  # a parser error: 502
        self._status = 101
        self.head_done = self.tunnel_open = True

    def _open_tunnel(self) -> None:
        """Relay the 101 head as vLLM sent it, then release what the client sent meanwhile."""
        self.head_written = True
        self._out.append(self._head_buffer)
        self.request.open_tunnel()

    def _set_up_inspection(self, status: int, fields: Fields) -> None:
        plan = self.request.plan
        if plan is None or plan.temperature_bucket == UNKNOWN_LABEL or status != 200:
            return
        if fields.value(b"content-encoding") not in (None, b"identity"):
            return
        content_type = fields.value(b"content-type") or b""
        limit = self.tap.inspect_limit
        if content_type.startswith(b"text/event-stream"):
            if plan.undo_include_usage:
                self._undo = IncludeUsageUndo(limit)
            else:
                self._watcher = UsageWatcher(limit)
        else:
            self._tail = bytearray()

    def _choose_framing(self, chunked: bool, no_body: bool) -> Framing:
        if no_body:
            return RAW
        http10 = self.request.client_http10
        if self._undo is not None or (chunked and http10) or self.until_close:
            return UNTIL_CLOSE if http10 or self.until_close else CHUNKED
        return RAW

    def on_body(self, data: bytes) -> None:
        """Once per body piece (the hot path, kept to few calls): inspect it, then relay it."""
        try:  # watch for per-request metrics; in rewrite mode, take the bytes to pass on
            undo, watcher = self._undo, self._watcher
            if undo is not None:
                data = undo.feed(data)
                if undo.final_chunk is not None:
                    self._note_final_chunk()
            elif watcher is not None:
                watcher.feed(data)
                if watcher.final_chunk is not None:
                    self._note_final_chunk()
            elif self._tail is not None:
                self._keep_tail(data)
        except Exception:  # fail open: stop inspecting, keep passing bytes
            self.tap.warn("inspect-response", "inspecting a response failed; passed on as is")
            self._stop_inspecting()
        framing = self._framing
        if not data or framing is RAW:
            return
        if self._first_body_at is None:  # _write_body(), inline
            self._first_body_at = time.monotonic()
        out = self._out
        if framing is CHUNKED:  # three pieces, joined once by the flush: no formatting a chunk
            out.append(chunk_size_line(len(data)))
            out.append(data)
            out.append(CRLF)
        else:
            out.append(data)

    def on_message_complete(self) -> None:
        if self.tunnel_open:
            return
        if self._interim:
            self._interim = False
            end = self._head_buffer.find(http1.HEAD_END) + len(http1.HEAD_END)
            self._head_buffer = self._head_buffer[end:]
            self._response_headers = []
            return
        self.complete_body()

    # inspection

    def _stop_inspecting(self) -> None:
        if self._undo is not None:
            self._undo.passthrough = True
        self._watcher = None
        self._tail = None

    def _note_final_chunk(self) -> None:
        if self._final_chunk_at is None:
            self._final_chunk_at = time.monotonic()

    def _keep_tail(self, data: bytes) -> None:
        tail = self._tail
        if tail is None:
            return
        tail += data
        if len(tail) > 2 * self.tap.inspect_limit:
            del tail[: -self.tap.inspect_limit]

    def outcome(self, request_done_at: float) -> Outcome:
        """The metrics the response carried; TTFT and TPOT for a stream."""
        stream = self._undo or self._watcher
        chunk = stream.final_chunk if stream is not None else None
        spec: SpecDecodeSummary | None = None
        if chunk is not None:
            spec = summary_from_chunk(chunk)
        elif self._tail is not None:
            spec = summary_from_response_tail(bytes(self._tail))
        ttft = tpot = None
        if stream is not None and self._first_body_at is not None:
            ttft = self._first_body_at - request_done_at
            tokens = completion_tokens_of(chunk) if chunk is not None else None
            if tokens is not None and tokens > 1 and self._final_chunk_at is not None:
                tpot = (self._final_chunk_at - self._first_body_at) / (tokens - 1)
        return spec, ttft, tpot

    # writing to the client

    def complete_body(self) -> None:
        """Flush what the rewrite still holds and end the body as its framing says."""
        if self._undo is not None:
            rest = self._undo.finish()
            if rest:
                self._write_body(http1.chunk(rest) if self._framing is CHUNKED else rest)
        if self._framing is CHUNKED:
            self._write_body(http1.LAST_CHUNK)
        self._response_done = True

    def _write_head(self) -> None:
        if self.head_written:
            return
        self.head_written = True  # queued: goes out with the first body bytes, in one write
        self._out.append(
            http1.response_head(
                self._status,
                self._reason,
                self._fields,
                self._framing,
                self.close_client,
            )
        )

    def _write_body(self, data: bytes) -> None:
        """Queue body bytes; ``flush`` writes them once per read from upstream (fewer sends)."""
        if not data:
            return
        if self._first_body_at is None:
            self._first_body_at = time.monotonic()
        self._out.append(data)

    def flush(self) -> None:
        out = self._out
        if not out:
            return
        self.client.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def write_error(self, status: int, message: str) -> None:
        """What is queued, then an error reply if no response head has gone out yet."""
        self.flush()
        if not self.head_written:
            self.head_written = True
            head = self.request.method == b"HEAD"
            self.client.write(http1.error_response(status, message, head=head))

    @property
    def reusable(self) -> bool:
        """vLLM's connection can carry another request, as far as this response goes."""
        return self._upstream_keep_alive and not self._surplus


class _BodyReader:
    """Collects the body of the first response in some bytes, ignoring what follows it."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.done = False

    def on_message_begin(self) -> None:
        if self.done:
            raise SurplusResponseError

    def on_body(self, data: bytes) -> None:
        self.pieces.append(data)

    def on_message_complete(self) -> None:
        self.done = True


def body_of(response: bytes) -> bytes:
    """The (de-chunked) body of the response at the start of ``response``."""
    reader = _BodyReader()
    with contextlib.suppress(httptools.HttpParserError):
        httptools.HttpResponseParser(reader).feed_data(response)
    return b"".join(reader.pieces)

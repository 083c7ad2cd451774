"""One request through the tap and its response: forwarding, framing, inspection, endings.

The response parser's callbacks are the exchange's methods; bytes go to the client as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from enum import Enum
from typing import TYPE_CHECKING

import httptools

from specdec_exporter.core.buckets import UNKNOWN_LABEL
from specdec_exporter.tap import http1
from specdec_exporter.tap.http1 import Framing, Headers
from specdec_exporter.tap.request import RequestPlan, plan_request, uninspected_plan
from specdec_exporter.tap.routes import is_inspected, upstream_target
from specdec_exporter.tap.spec import (
    SpecDecodeSummary,
    completion_tokens_of,
    summary_from_chunk,
    summary_from_response_tail,
)
from specdec_exporter.tap.sse import IncludeUsageUndo, UsageWatcher
from specdec_exporter.tap.stats import RequestRecord
from specdec_exporter.tap.upstream import UpstreamConnection

if TYPE_CHECKING:
    from specdec_exporter.tap.proxy import ClientConnection, Tap

MAX_HEAD_BYTES = 64 * 1024
MAX_HELD_BYTES = 64 * 1024
"""Client bytes held after an Upgrade head while vLLM decides; past this, reading pauses."""


class SurplusResponseError(Exception):
    """vLLM sent bytes past the end of the response: raised to stop the response parser."""


class Stage(Enum):
    RECEIVING = 1
    WAITING = 2
    RESPONDING = 3
    DONE = 4


class Exchange:
    """One request and its response; the response parser's callbacks are its methods."""

    def __init__(self, tap: Tap, client: ClientConnection, method: bytes, target: bytes, *,
                 headers: Headers, client_http10: bool, keep_alive: bool, upgrade: bool) -> None:
        self.tap = tap
        self.client = client
        self.method = method
        self.target = target
        self.headers = headers
        self.client_http10 = client_http10
        self.client_keep_alive = keep_alive and not client_http10
        self.upgrade = upgrade
        self.tunneling = False
        """Client bytes after the head are not HTTP: held, then tunnelled or dropped."""
        self.tunnel_open = False
        """vLLM answered 101: a byte pipe both ways."""
        self._held: list[bytes] | None = None
        self._held_size = 0
        self.stage = Stage.RECEIVING
        self.last_activity = time.monotonic()
        self.inspected = is_inspected(method, target)
        self.plan: RequestPlan | None = None
        self.label = ""
        # request side
        self._declared_length = http1.content_length(headers)
        self._has_body = self._declared_length is not None or http1.is_chunked(headers)
        self._body: list[bytes] = []
        self._body_size = 0
        self._streaming_body = False
        self._request_complete = False
        self._request_bytes: bytes | None = None
        self._pending_upstream: list[bytes] = []
        self._retried = False
        self._connect_task: asyncio.Task[None] | None = None
        self.upstream: UpstreamConnection | None = None
        # response side
        self.parser = httptools.HttpResponseParser(self)
        self._status = 0
        self._reason = b""
        self._response_headers: Headers = []
        self._head_buffer = b""
        self._head_size = 0
        self._head_done = False
        self._interim = False
        self._framing = Framing.RAW
        self._until_close = False
        self._upstream_keep_alive = False
        self._close_client = False
        self._head_written = False
        self._out: list[bytes] = []
        self._response_started = False
        self._response_done = False
        self._no_body = False
        self._surplus = False
        self._watcher: UsageWatcher | None = None
        self._undo: IncludeUsageUndo | None = None
        self._tail: bytearray | None = None
        self._request_done_at = 0.0
        self._first_body_at: float | None = None
        self._final_chunk_at: float | None = None

    # request side

    def start(self) -> None:
        self.tap.exchanges.add(self)
        if http1.header_value(self.headers, b"expect") == b"100-continue":
            self.client.write(http1.CONTINUE_RESPONSE)
        if self._declared_length is not None and self._declared_length > self.tap.inspect_limit:
            self._start_streaming_body()

    def request_body(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self._streaming_body:
            self._send_body(data)
            return
        self._body.append(data)
        self._body_size += len(data)
        if self._body_size > self.tap.inspect_limit:
            self._start_streaming_body()

    def request_complete(self) -> None:
        self._request_complete = True
        self._request_done_at = time.monotonic()
        if self.stage is Stage.DONE:
            return
        if self._streaming_body:
            if self._declared_length is None:
                self._send_upstream(http1.LAST_CHUNK)
            if self.stage is Stage.RECEIVING:
                self.stage = Stage.WAITING
            return
        body = b"".join(self._body)
        self._body = []
        if self.inspected:
            try:
                self._set_plan(plan_request(body, self.tap.buckets, self.tap.default_temperature))
            except Exception:  # fail open: pass the request on unlabelled
                self.tap.warn("inspect", "inspecting a request failed; passed on uninspected")
                self._set_plan(uninspected_plan(body))
            body = self.plan.body if self.plan is not None else body
        head = http1.request_head(self.method, self._upstream_target(),
                                  self.headers, len(body) if self._has_body else None,
                                  upgrade=self.upgrade, default_host=self.tap.origin.authority)
        self._request_bytes = head + body
        self.stage = Stage.WAITING
        self._send_upstream(self._request_bytes)

    def _set_plan(self, plan: RequestPlan) -> None:
        self.plan = plan
        self.label = self.tap.model_label(plan.model)

    def _start_streaming_body(self) -> None:
        """A body over the inspection cap: sent on as it arrives, not inspected."""
        self._streaming_body = True
        if self.inspected:
            self._set_plan(uninspected_plan(b""))
        chunked = self._declared_length is None
        head = http1.request_head(self.method, self._upstream_target(), self.headers,
                                  self._declared_length, chunked_body=chunked,
                                  default_host=self.tap.origin.authority)
        buffered, self._body = b"".join(self._body), []
        self._send_upstream(head)
        if buffered:
            self._send_body(buffered)

    def _send_body(self, data: bytes) -> None:
        self._send_upstream(http1.chunk(data) if self._declared_length is None else data)

    def _upstream_target(self) -> bytes:
        return upstream_target(self.tap.origin.path_prefix, self.target)

    def _send_upstream(self, data: bytes, fresh: bool = False) -> None:
        if self.upstream is not None:
            self.upstream.write(data)
            return
        self._pending_upstream.append(data)
        if self._streaming_body:
            self.client.pause_reading(True)  # hold a large upload until the connection is up
        if len(self._pending_upstream) == 1:
            self._acquire_upstream(fresh)

    def _acquire_upstream(self, fresh: bool = False) -> None:
        connection = None if fresh or self.upgrade else self.tap.pool.take_idle()
        if connection is not None:
            self._attach(connection)
        else:
            self._connect_task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            connection = await self.tap.pool.connect()
        except (OSError, TimeoutError) as exc:
            self.tap.warn("connect", f"cannot connect to vLLM at {self.tap.origin.host}:"
                          f"{self.tap.origin.port}: {exc.__class__.__name__}")
            self._fail(502, "the tap could not connect to the vLLM server")
            return
        if self.stage is Stage.DONE:
            connection.done(reusable=True)
            return
        self._attach(connection)

    def _attach(self, connection: UpstreamConnection) -> None:
        self.upstream = connection
        connection.sink = self
        self.last_activity = time.monotonic()
        pending, self._pending_upstream = self._pending_upstream, []
        for data in pending:
            connection.write(data)
        if self._streaming_body:
            self.client.pause_reading(False)

    # Upgrade: client bytes after the head wait for vLLM's answer; only a 101 opens a pipe

    def hold_for_upgrade(self, early: bytes) -> None:
        """The request asked for an Upgrade: what follows its head is held until vLLM answers."""
        self.tunneling = True
        self._held = []
        self.tunnel_from_client(early)

    def tunnel_from_client(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self.tunnel_open:
            self._send_upstream(data)
        elif self._held is not None and data:  # None: vLLM declined, the bytes are dropped
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size > MAX_HELD_BYTES:
                self.client.pause_reading(True)

    def _switch_protocols(self) -> None:
        """vLLM answered 101: only valid for a request that asked for an Upgrade."""
        if not self.upgrade:
            raise ValueError("101 to a request without Upgrade")  # a parser error: 502
        self._status = 101
        self._head_done = self.tunnel_open = True
        self.stage = Stage.RESPONDING

    def _open_tunnel(self) -> None:
        """Relay the 101 head as vLLM sent it, then release what the client sent meanwhile."""
        self._head_written = True
        self._out.append(self._head_buffer)
        held, self._held = self._held or [], None
        if held:
            self._send_upstream(b"".join(held))
        self.client.pause_reading(False)

    # response side: fed by the upstream connection

    def feed_response(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self.tunnel_open:
            self.client.write(data)
            return
        head_pending = not self._head_done
        if head_pending:
            self._head_buffer += data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the 101 answering an Upgrade request: what follows is the tunnel's
        except httptools.HttpParserError:
            if not self._response_done:
                self._fail(502, "vLLM sent an invalid HTTP response")
                return
            if not head_pending and self._framing is Framing.RAW:
                self._cut_surplus()  # its end is somewhere in this read: cannot be placed
                return
            self._surplus = True  # bytes after the end of the response: dropped
        if head_pending and not self._head_done and len(self._head_buffer) > MAX_HEAD_BYTES:
            self._fail(502, "vLLM sent a response head over 64 KiB")
            return
        if head_pending and self._head_done:
            self._head_read_done()
        elif self._framing is Framing.RAW and self._head_done:
            self._write_body(data)
        self._flush()
        if self._response_done:
            self._finish()

    def _head_read_done(self) -> None:
        """The read that completed the response head: relay it and the body bytes it carried."""
        if self.tunnel_open:
            self._open_tunnel()
        elif self._framing is Framing.RAW:
            body_start = self._head_buffer.find(http1.HEAD_END) + len(http1.HEAD_END)
            self._write_head()
            self._write_body(self._raw_body(self._head_buffer[body_start:]))
        self._head_buffer = b""

    def _raw_body(self, after_head: bytes) -> bytes:
        """The body bytes of the first read, without anything past the end of the response."""
        if self._no_body:
            self._surplus = self._surplus or bool(after_head)
            return b""
        if not http1.is_chunked(self._response_headers):  # the end is at Content-Length
            length = http1.content_length(self._response_headers) or 0
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
        self._end(close_client=True)

    def on_message_begin(self) -> None:
        if self._response_done:
            raise SurplusResponseError  # a second response in the same read: stop parsing here
        self._response_started = True
        self._request_bytes = None  # an answer has begun: no retry from here on

    def on_status(self, reason: bytes) -> None:
        self._reason = reason

    def on_header(self, name: bytes, value: bytes) -> None:
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
        self._status = status
        self._head_done = True
        self._held = None  # vLLM declined an Upgrade: held client bytes are never sent
        self.stage = Stage.RESPONDING
        self._upstream_keep_alive = self.parser.should_keep_alive()
        headers = self._response_headers
        chunked = http1.is_chunked(headers)
        no_body = self._no_body = self.method == b"HEAD" or status in (204, 304)
        self._until_close = not no_body and not chunked and http1.content_length(headers) is None
        self._set_up_inspection(status, headers)
        self._framing = self._choose_framing(chunked, no_body)
        self._close_client = (not self.client_keep_alive or self._until_close
                              or self._framing is Framing.UNTIL_CLOSE or self.upgrade
                              or not self._request_complete or self.client.refused)
        if self._framing is not Framing.RAW:
            self._write_head()
        if no_body:
            self._response_done = True

    def _set_up_inspection(self, status: int, headers: Headers) -> None:
        plan = self.plan
        if plan is None or plan.temperature_bucket == UNKNOWN_LABEL or status != 200:
            return
        if http1.header_value(headers, b"content-encoding") not in (None, b"identity"):
            return
        content_type = http1.header_value(headers, b"content-type") or b""
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
            return Framing.RAW
        if self._undo is not None or (chunked and self.client_http10) or self._until_close:
            return Framing.UNTIL_CLOSE if self.client_http10 or self._until_close \
                else Framing.CHUNKED
        return Framing.RAW

    def on_body(self, data: bytes) -> None:
        try:
            data = self._inspect(data)
        except Exception:  # fail open: stop inspecting, keep passing bytes
            self.tap.warn("inspect-response", "inspecting a response failed; passed on as is")
            self._stop_inspecting()
        if not data or self._framing is Framing.RAW:
            return
        self._write_body(http1.chunk(data) if self._framing is Framing.CHUNKED else data)

    def _inspect(self, data: bytes) -> bytes:
        """Watch the body for per-request metrics; in rewrite mode, return the bytes to pass on."""
        if self._undo is not None:
            data = self._undo.feed(data)
            self._note_final_chunk(self._undo.final_chunk)
        elif self._watcher is not None:
            self._watcher.feed(data)
            self._note_final_chunk(self._watcher.final_chunk)
        elif self._tail is not None:
            self._keep_tail(data)
        return data

    def _stop_inspecting(self) -> None:
        if self._undo is not None:
            self._undo.passthrough = True
        self._watcher = None
        self._tail = None

    def on_message_complete(self) -> None:
        if self.tunnel_open:
            return
        if self._interim:
            self._interim = False
            end = self._head_buffer.find(http1.HEAD_END) + len(http1.HEAD_END)
            self._head_buffer = self._head_buffer[end:]
            self._response_headers = []
            return
        self._complete_body()

    def _complete_body(self) -> None:
        """Flush what the rewrite still holds and end the body as its framing says."""
        if self._undo is not None:
            rest = self._undo.finish()
            if rest:
                self._write_body(http1.chunk(rest) if self._framing is Framing.CHUNKED else rest)
        if self._framing is Framing.CHUNKED:
            self._write_body(http1.LAST_CHUNK)
        self._response_done = True

    def _note_final_chunk(self, chunk: object) -> None:
        if chunk is not None and self._final_chunk_at is None:
            self._final_chunk_at = time.monotonic()

    def _keep_tail(self, data: bytes) -> None:
        tail = self._tail
        if tail is None:
            return
        tail += data
        if len(tail) > 2 * self.tap.inspect_limit:
            del tail[: -self.tap.inspect_limit]

    def _write_head(self) -> None:
        if self._head_written:
            return
        self._head_written = True  # queued: goes out with the first body bytes, in one write
        self._out.append(http1.response_head(self._status, self._reason, self._response_headers,
                                             self._framing, self._close_client))

    def _write_body(self, data: bytes) -> None:
        """Queue body bytes; ``_flush`` writes them once per read from upstream (fewer sends)."""
        if not data:
            return
        if self._first_body_at is None:
            self._first_body_at = time.monotonic()
        self._out.append(data)

    def _flush(self) -> None:
        out = self._out
        if not out:
            return
        self.client.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    # endings

    def _finish(self) -> None:
        """The response is complete: record, recycle the upstream connection, free the client."""
        if self.stage is Stage.DONE:
            return
        self.stage = Stage.DONE
        self.tap.exchanges.discard(self)
        if self.plan is not None:
            try:
                record = self._record_of_success()
            except Exception:  # fail open: count it, unattributed
                record = RequestRecord(self.label, self.plan.temperature_bucket, None)
            self.tap.record(record)
        connection, self.upstream = self.upstream, None
        if connection is not None:
            reusable = (self._upstream_keep_alive and self._request_complete and not self.upgrade
                        and not self._surplus)
            connection.done(reusable)
        self.client.exchange_done(close=self._close_client)

    def upstream_lost(self) -> None:
        if self.stage is Stage.DONE:
            return
        connection, self.upstream = self.upstream, None
        if self.tunnel_open:
            self._end(close_client=True)
        elif self._head_done and self._until_close:
            self._complete_body()
            self._flush()
            self._finish()
        elif self._can_retry(connection):
            self._retried = True
            self._pending_upstream, self._head_buffer = [], b""
            self._send_upstream(self._request_bytes or b"", fresh=True)
        else:
            self._fail(502, "vLLM closed the connection before the response was complete")

    def _can_retry(self, connection: UpstreamConnection | None) -> bool:
        """A reused idle connection that closed before any answer: send once more on a new one."""
        return (connection is not None and connection.reused and not self._retried
                and not self._response_started and self._request_bytes is not None)

    @property
    def request_received(self) -> bool:
        """The client's request is complete: bytes after it belong to a (refused) next one."""
        return self._request_complete

    @property
    def answered(self) -> bool:
        """A response head (or tunnel bytes) has gone to the client."""
        return self._head_written

    def client_lost(self) -> None:
        """The client went away: drop the upstream connection so vLLM aborts the request."""
        if self.stage is Stage.DONE:
            return
        self.stage = Stage.DONE
        self.tap.exchanges.discard(self)
        self._record_failure()
        self._drop_upstream()
        if self._connect_task is not None:
            self._connect_task.cancel()

    def _drop_upstream(self) -> None:
        connection, self.upstream = self.upstream, None
        if connection is not None:
            connection.sink = None
            connection.abort()

    def timed_out(self) -> None:
        self.tap.warn("timeout", f"no data from vLLM or client for {self.tap.timeout:g} s")
        self._fail(504, "vLLM did not answer within the tap's timeout")

    def _fail(self, status: int, message: str) -> None:
        """Give up: an error reply if nothing was sent yet, else cut the client connection."""
        if self.stage is Stage.DONE:
            return
        self._flush()
        if not self._head_written:
            self._head_written = True
            self.client.write(http1.error_response(status, message,
                                                   head=self.method == b"HEAD"))
        self._end(close_client=True)

    def _end(self, close_client: bool) -> None:
        self.stage = Stage.DONE
        self.tap.exchanges.discard(self)
        self._record_failure()
        self._drop_upstream()
        if close_client:
            self.client.exchange = None
            self.client.close()

    def client_paused(self, paused: bool) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading(paused)

    def upstream_paused(self, paused: bool) -> None:
        self.client.pause_reading(paused)

    # records

    def _record_failure(self) -> None:
        if self.plan is not None:
            self.tap.record(RequestRecord(self.label, self.plan.temperature_bucket, None))

    def _record_of_success(self) -> RequestRecord:
        plan = self.plan
        assert plan is not None
        stream = self._undo or self._watcher
        chunk = stream.final_chunk if stream is not None else None
        spec: SpecDecodeSummary | None = None
        if chunk is not None:
            spec = summary_from_chunk(chunk)
        elif self._tail is not None:
            spec = summary_from_response_tail(bytes(self._tail))
        ttft = tpot = None
        if stream is not None and self._first_body_at is not None:
            ttft = self._first_body_at - self._request_done_at
            tokens = completion_tokens_of(chunk) if chunk is not None else None
            if tokens is not None and tokens > 1 and self._final_chunk_at is not None:
                tpot = (self._final_chunk_at - self._first_body_at) / (tokens - 1)
        return RequestRecord(self.label, plan.temperature_bucket, spec, ttft, tpot)


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

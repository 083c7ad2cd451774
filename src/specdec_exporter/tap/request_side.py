"""The request side of an exchange: the client's body buffered up to the inspection cap (or
streamed past it), the head sent upstream, the upstream connection, one retry, held Upgrade bytes.
"""

from __future__ import annotations

import asyncio
import time

from specdec_exporter.tap import http1
from specdec_exporter.tap.contracts import ClientSide, Endings, TapContext
from specdec_exporter.tap.http1 import Fields
from specdec_exporter.tap.request import RequestPlan, plan_request, uninspected_plan
from specdec_exporter.tap.routes import is_inspected, upstream_target
from specdec_exporter.tap.upstream import ResponseSink, UpstreamConnection

MAX_HELD_BYTES = 64 * 1024
"""Client bytes held after an Upgrade head while vLLM decides; past this, reading pauses."""


class RequestSide:
    """The client's request on its way to vLLM; its response goes to ``sink``."""

    def __init__(
        self,
        tap: TapContext,
        client: ClientSide,
        owner: Endings,
        method: bytes,
        target: bytes,
        *,
        fields: Fields,
        client_http10: bool,
        keep_alive: bool,
        upgrade: bool,
    ) -> None:
        self.tap = tap
        self.client = client
        self.owner = owner
        self.sink: ResponseSink | None = None
        """The response side: what the upstream connection feeds (set by the exchange)."""
        self.method = method
        self.target = target
        self.fields = fields
        self.client_http10 = client_http10
        self.client_keep_alive = keep_alive and not client_http10
        self.upgrade = upgrade
        self.inspected = is_inspected(method, target)
        self.plan: RequestPlan | None = None
        self.label = ""
        self.last_activity = time.monotonic()
        self.complete = False
        """The client's request has been read to its end."""
        self.done_at = 0.0
        self.request_bytes: bytes | None = None
        """A buffered request as sent upstream, kept for one retry until an answer begins."""
        self.upstream: UpstreamConnection | None = None
        self._declared_length = fields.content_length()
        self._has_body = self._declared_length is not None or fields.chunked()
        self._body: list[bytes] = []
        self._body_size = 0
        self._streaming_body = False
        self._pending_upstream: list[bytes] = []
        self._retried = False
        self._connect_task: asyncio.Task[None] | None = None
        self.tunneling = False
        """Client bytes after the head are not HTTP: held, then tunnelled or dropped."""
        self.tunnel_open = False
        """vLLM answered 101: client bytes go upstream as they come."""
        self._held: list[bytes] | None = None
        self._held_size = 0

    # the client's body

    def start(self) -> None:
        if self.fields.value(b"expect") == b"100-continue":
            self.client.write(http1.CONTINUE_RESPONSE)
        if self._declared_length is not None and self._declared_length > self.tap.inspect_limit:
            self._start_streaming_body()

    def body(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self._streaming_body:
            self._send_body(data)
            return
        self._body.append(data)
        self._body_size += len(data)
        if self._body_size > self.tap.inspect_limit:
            self._start_streaming_body()

    def end(self) -> None:
        """The client's request is complete: send it (buffered) or end its stream."""
        self.complete = True
        self.done_at = time.monotonic()
        if self.owner.over:
            return
        if self._streaming_body:
            if self._declared_length is None:
                self.send_upstream(http1.LAST_CHUNK)
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
        head = http1.request_head(
            self.method,
            self._upstream_target(),
            self.fields,
            len(body) if self._has_body else None,
            upgrade=self.upgrade,
            default_host=self.tap.origin.authority,
        )
        self.request_bytes = head + body
        self.send_upstream(self.request_bytes)

    def _set_plan(self, plan: RequestPlan) -> None:
        self.plan = plan
        self.label = self.tap.model_label(plan.model)

    def _start_streaming_body(self) -> None:
        """A body over the inspection cap: sent on as it arrives, not inspected."""
        self._streaming_body = True
        if self.inspected:
            self._set_plan(uninspected_plan(b""))
        chunked = self._declared_length is None
        head = http1.request_head(
            self.method,
            self._upstream_target(),
            self.fields,
            self._declared_length,
            chunked_body=chunked,
            default_host=self.tap.origin.authority,
        )
        buffered, self._body = b"".join(self._body), []
        self.send_upstream(head)
        if buffered:
            self._send_body(buffered)

    def _send_body(self, data: bytes) -> None:
        self.send_upstream(http1.chunk(data) if self._declared_length is None else data)

    def _upstream_target(self) -> bytes:
        return upstream_target(self.tap.origin.path_prefix, self.target)

    # the upstream connection

    def send_upstream(self, data: bytes, fresh: bool = False) -> None:
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
            # asyncio's future keeps the exception: without its traceback, whose frames hold
            # this side, the side is freed when the exchange ends (no cycle left to collect)
            exc.__traceback__ = None
            origin = self.tap.origin
            self.tap.warn(
                "connect",
                f"cannot connect to vLLM at {origin.host}:{origin.port}: {exc.__class__.__name__}",
            )
            self.owner.fail(502, "the tap could not connect to the vLLM server")
            return
        if self.owner.over:
            connection.done(reusable=True)
            return
        self._attach(connection)

    def _attach(self, connection: UpstreamConnection) -> None:
        self.upstream = connection
        connection.sink = self.sink
        self.last_activity = time.monotonic()
        pending, self._pending_upstream = self._pending_upstream, []
        for data in pending:
            connection.write(data)
        if self._streaming_body:
            self.client.pause_reading(False)

    def can_retry(self, connection: UpstreamConnection | None) -> bool:
        """A reused idle connection closed before any answer, the request is still held, and
        sending it again cannot make vLLM act twice: none of its bytes were written, or its
        method is idempotent. A POST that was written is never resent (RFC 9110 section 9.2.2:
        vLLM may have read it and be generating)."""
        return (
            connection is not None
            and connection.reused
            and not self._retried
            and self.request_bytes is not None
            and (not connection.written or self.method in http1.IDEMPOTENT_METHODS)
        )

    def resend(self) -> None:
        """Send the buffered request once more, on a new connection."""
        self._retried = True
        self._pending_upstream = []
        self.send_upstream(self.request_bytes or b"", fresh=True)

    def pause_upstream(self, paused: bool) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading(paused)

    def detach_upstream(self) -> UpstreamConnection | None:
        connection, self.upstream = self.upstream, None
        return connection

    def release_upstream(self, reusable: bool) -> None:
        """The exchange is over: the connection goes back to the pool if ``reusable``."""
        connection = self.detach_upstream()
        if connection is not None:
            connection.done(reusable)

    def drop_upstream(self) -> None:
        """Abort the upstream connection (vLLM aborts the request) or the connect under way."""
        connection = self.detach_upstream()
        if connection is not None:
            connection.sink = None
            connection.abort()

    def cancel_connect(self) -> None:
        if self._connect_task is not None:
            self._connect_task.cancel()

    # Upgrade: client bytes after the head wait for vLLM's answer; only a 101 opens a pipe

    def hold_for_upgrade(self, early: bytes) -> None:
        """The request asked for an Upgrade: what follows its head is held until vLLM answers."""
        self.tunneling = True
        self._held = []
        self.tunnel_from_client(early)

    def tunnel_from_client(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self.tunnel_open:
            self.send_upstream(data)
        elif self._held is not None and data:  # None: vLLM declined, the bytes are dropped
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size > MAX_HELD_BYTES:
                self.client.pause_reading(True)

    def open_tunnel(self) -> None:
        """vLLM answered 101: release what the client sent meanwhile, then pipe the rest."""
        self.tunnel_open = True
        held, self._held = self._held or [], None
        if held:
            self.send_upstream(b"".join(held))
        self.client.pause_reading(False)

    def decline_upgrade(self) -> None:
        """vLLM answered the request itself: held client bytes are never sent."""
        self._held = None

"""One request through the tap and its response. The exchange is what the client connection and
the upstream connection talk to; its parts (``RequestSide``, ``ResponseSide`` and its
``Downstream``) never call back into it: they hand back bytes to send or a verdict, and the
exchange acts on them. It holds the upstream connection (connect, one retry) and ends, in one
place (``_end``), however it ends.

An ended exchange leaves no reference cycle behind: the client connection and the upstream
connection let go of it, and the response parser's callbacks go with the parser. So each request's
objects are freed by reference counting when it ends, not at some later garbage collection, which
also no longer has live exchanges to walk (BENCHMARKS.md, "Session 5").
"""

from __future__ import annotations

import asyncio
import time
from enum import Enum

from specdec_exporter.tap import http1
from specdec_exporter.tap.context import TapContext
from specdec_exporter.tap.downstream import Client, Downstream
from specdec_exporter.tap.http1 import Fields
from specdec_exporter.tap.request_side import RequestSide
from specdec_exporter.tap.response_side import (
    ANSWERED,
    DONE,
    INVALID,
    SURPLUS,
    TUNNEL,
    ResponseSide,
)
from specdec_exporter.tap.stats import RequestRecord
from specdec_exporter.tap.upstream import ResponseSink, UpstreamConnection


class Stage(Enum):
    RECEIVING = 1
    WAITING = 2
    RESPONDING = 3
    DONE = 4


class Exchange(ResponseSink):
    """One request and its response: fed by the client connection and by the upstream one."""

    def __init__(
        self,
        context: TapContext,
        client: Client,
        method: bytes,
        target: bytes,
        *,
        fields: Fields,
        client_http10: bool,
        keep_alive: bool,
        upgrade: bool,
    ) -> None:
        self.context = context
        self.client = client
        self.over = False
        """Ended: recorded, its upstream connection recycled or aborted."""
        self.request = RequestSide(
            context,
            method,
            target,
            fields=fields,
            client_http10=client_http10,
            keep_alive=keep_alive,
            upgrade=upgrade,
        )
        self.downstream = Downstream(client)
        self.response = ResponseSide(context, self.request, self.downstream)
        self.upstream: UpstreamConnection | None = None
        self.reads = 0
        """vLLM's reads so far: counted, not timed (the sweep dates them; no clock read a chunk)."""
        self._pending: list[bytes] = []
        """Bytes for vLLM while its connection is being made."""
        self._connect_task: asyncio.Task[None] | None = None
        self._retried = False
        self._reads_seen = 0
        self._progress_at = self.request.last_activity

    # from the client connection

    def start(self) -> None:
        if self.request.expects_continue:
            self.client.write(http1.CONTINUE_RESPONSE)
        self._send(self.request.start())

    def request_body(self, data: bytes) -> None:
        self._send(self.request.body(data))

    def request_complete(self) -> None:
        """The client's request ended: send it. A bug on the way is a 502, never a stall: an
        error raised here would reach the request parser as a broken pipelined request, which
        is dropped without an answer (how a trailer held connections open, issue 19)."""
        if self.over:
            return
        try:
            self._send(self.request.end())
        except Exception:
            self.context.warn("forward", "forwarding a request failed; answered 502")
            self._fail(502, "the tap could not forward the request")

    def hold_for_upgrade(self, early: bytes) -> None:
        if self.request.hold_from(early):
            self.client.pause_reading(True)

    def tunnel_from_client(self, data: bytes) -> None:
        if self.response.tunnel_open:
            self.request.last_activity = time.monotonic()
            self._send(data)
        elif self.request.hold(data):
            self.client.pause_reading(True)

    def client_paused(self, paused: bool) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading(paused)

    def client_lost(self) -> None:
        """The client went away: drop the upstream connection so vLLM aborts the request."""
        self._end(completed=False, client_open=False)

    @property
    def upgrade(self) -> bool:
        """The request asked for an Upgrade."""
        return self.request.upgrade

    @property
    def tunneling(self) -> bool:
        """Client bytes after the head are not HTTP: held, then tunnelled or dropped."""
        return self.request.tunneling

    @property
    def request_received(self) -> bool:
        """The client's request is complete: bytes after it belong to a (refused) next one."""
        return self.request.complete

    @property
    def answered(self) -> bool:
        """A response head (or tunnel bytes) has gone to the client."""
        return self.downstream.head_written

    # from the upstream connection (upstream.ResponseSink)

    def feed_response(self, data: bytes) -> None:
        self.reads += 1
        verdict = self.response.feed(data)
        if verdict:
            self._act_on(verdict)

    def upstream_lost(self) -> None:
        if self.over:
            return
        connection, self.upstream = self.upstream, None
        response = self.response
        if response.tunnel_open:
            self._end(completed=False)
        elif response.head_done and response.until_close:
            response.end_body()
            self._end(completed=True)
        elif self._can_retry(connection) and not response.started:
            response.forget_head()
            self._resend()
        else:
            if connection is not None and connection.reused and not response.started:
                self.context.warn(
                    "not-resent",
                    "a reused connection to vLLM closed after a request was written, before any"
                    " answer; not sent again (vLLM may be running it): 502. Keep"
                    " --proxy-upstream-idle-timeout under vLLM's keep-alive",
                )
            self._fail(502, "vLLM closed the connection before the response was complete")

    def upstream_paused(self, paused: bool) -> None:
        self.client.pause_reading(paused)

    def _act_on(self, verdict: int) -> None:
        """What the response side's verdict on a read asks for."""
        if verdict == ANSWERED:
            self.request.answered()
        elif verdict == DONE:
            self._end(completed=True)
        elif verdict == TUNNEL:
            self._send(self.request.release_held())
            self.request.answered()
            self.client.pause_reading(False)
        elif verdict == INVALID:
            self._fail(502, self.response.failure)
        elif verdict == SURPLUS:
            self.context.warn(
                "surplus", "vLLM sent bytes past the end of a response; connection cut"
            )
            self._end(completed=False)

    # from the tap's sweep

    def idle_for(self, now: float) -> float:
        """Seconds since the last byte from the client or from vLLM, for the sweep that times
        out stalled exchanges. vLLM's reads are counted rather than timed (a clock read a chunk
        cost the hot path), so the sweep that sees their count move dates them: a stall is
        found between one timeout and one timeout plus two sweeps after its last byte."""
        if self.reads != self._reads_seen:
            self._reads_seen = self.reads
            self._progress_at = now
        return now - max(self.request.last_activity, self._progress_at)

    def timed_out(self) -> None:
        self.context.warn("timeout", f"no data from vLLM or client for {self.context.timeout:g} s")
        self._fail(504, "vLLM did not answer within the tap's timeout")

    @property
    def stage(self) -> Stage:
        if self.over:
            return Stage.DONE
        if self.response.head_done:
            return Stage.RESPONDING
        return Stage.WAITING if self.request.complete else Stage.RECEIVING

    # the upstream connection

    def _send(self, data: bytes, fresh: bool = False) -> None:
        """Send ``data`` to vLLM, on a connection taken from the pool or made for it
        (``fresh``: a new one, as an Upgrade always has)."""
        if not data:
            return
        if self.upstream is not None:
            self.upstream.write(data)
            return
        self._pending.append(data)
        if self.request.streaming:
            self.client.pause_reading(True)  # hold a large upload until the connection is up
        if len(self._pending) > 1:
            return  # a connection is on its way
        connection = None if fresh or self.request.upgrade else self.context.pool.take_idle()
        if connection is not None:
            self._attach(connection)
        else:
            self._connect_task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            connection = await self.context.pool.connect()
        except (OSError, TimeoutError) as exc:
            self._connect_task = None
            # asyncio's future keeps the exception: without its traceback, whose frames hold
            # this exchange, it is freed when it ends (no cycle left to collect)
            exc.__traceback__ = None
            origin = self.context.origin
            self.context.warn(
                "connect",
                f"cannot connect to vLLM at {origin.host}:{origin.port}: {exc.__class__.__name__}",
            )
            self._fail(502, "the tap could not connect to the vLLM server")
            return
        self._connect_task = None
        if self.over:
            connection.done(reusable=True)
            return
        self._attach(connection)

    def _attach(self, connection: UpstreamConnection) -> None:
        self.upstream = connection
        connection.sink = self
        self.request.last_activity = time.monotonic()
        pending, self._pending = self._pending, []
        for data in pending:
            connection.write(data)
        if self.request.streaming:
            self.client.pause_reading(False)

    def _can_retry(self, connection: UpstreamConnection | None) -> bool:
        """A reused idle connection closed before any answer, the request is still held, and
        sending it again cannot make vLLM act twice: none of its bytes were written, or its
        method is idempotent. A POST that was written is never resent (RFC 9110 section 9.2.2:
        vLLM may have read it and be generating)."""
        return (
            connection is not None
            and connection.reused
            and not self._retried
            and self.request.request_bytes is not None
            and (not connection.written or self.request.method in http1.IDEMPOTENT_METHODS)
        )

    def _resend(self) -> None:
        """Send the buffered request once more, on a new connection."""
        self._retried = True
        self._pending = []
        self._send(self.request.request_bytes or b"", fresh=True)

    # the end: every way an exchange ends comes through _end, once

    def _fail(self, status: int, message: str) -> None:
        """Give up: an error reply if nothing was sent yet, else a cut client connection."""
        if self.over:
            return
        self.downstream.error(status, message, head_only=self.request.method == b"HEAD")
        self._end(completed=False)

    def _end(self, completed: bool, client_open: bool = True) -> None:
        """The exchange is over. ``completed``: the response reached its end, and the request is
        counted with what it showed, its upstream connection back to the pool if it can carry
        another request; else it is counted unattributed, vLLM's connection is aborted (vLLM
        aborts the request) or its connect cancelled, and the client connection closes.
        ``client_open``: the client connection is still there, to be handed back."""
        if self.over:
            return
        self.over = True
        self._record(completed)
        connection, self.upstream = self.upstream, None
        if connection is not None:
            if completed:
                reusable = self.response.reusable and self.request.complete and not self.upgrade
                connection.done(reusable)
            else:
                connection.sink = None
                connection.abort()
        task, self._connect_task = self._connect_task, None
        if task is not None:
            task.cancel()  # let go of it: its cancellation's traceback holds this exchange
        if client_open:
            self.client.exchange_done(close=not completed or self.response.close_client)
        self.response.drop_parser()  # its callbacks are the response side's: a cycle

    def _record(self, completed: bool) -> None:
        plan = self.request.plan
        if plan is None:
            return
        label, bucket = self.request.label, plan.temperature_bucket
        if not completed:
            self.context.record(RequestRecord(label, bucket, None))
            return
        try:
            spec, ttft, tpot = self.response.outcome()
            record = RequestRecord(label, bucket, spec, ttft, tpot)
        except Exception:  # fail open: count it, unattributed
            record = RequestRecord(label, bucket, None)
        self.context.record(record)

"""One request through the tap and its response: owns the request side and the response side,
and ends the exchange (recorded once, the upstream connection recycled or aborted, one retry).

An ended exchange leaves no reference cycle behind (``Exchange._let_go``): its sides stop pointing
at it and at each other, and the response parser's callbacks go with the parser. So each request's
objects are freed by reference counting when it ends, not at some later garbage collection, which
also no longer has live exchanges to walk (BENCHMARKS.md, "Session 5").
"""

from __future__ import annotations

from enum import Enum

from specdec_exporter.tap.contracts import ClientSide, TapContext
from specdec_exporter.tap.http1 import Fields
from specdec_exporter.tap.request_side import RequestSide
from specdec_exporter.tap.response_side import ResponseSide
from specdec_exporter.tap.stats import RequestRecord
from specdec_exporter.tap.upstream import UpstreamConnection


class Stage(Enum):
    RECEIVING = 1
    WAITING = 2
    RESPONDING = 3
    DONE = 4


class Ended:
    """The owner of the sides of an ended exchange: over, and every ending a no-op (as the
    exchange's own are once it is over)."""

    @property
    def over(self) -> bool:
        return True

    def finish(self) -> None:
        pass

    def fail(self, status: int, message: str) -> None:
        pass

    def cut(self) -> None:
        pass

    def upstream_lost(self) -> None:
        pass


ENDED = Ended()


class Exchange:
    """One request and its response, as the client connection sees them."""

    def __init__(
        self,
        tap: TapContext,
        client: ClientSide,
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
        self.over = False
        """Ended: recorded, its upstream connection recycled or aborted."""
        self.request = RequestSide(
            tap,
            client,
            self,
            method,
            target,
            fields=fields,
            client_http10=client_http10,
            keep_alive=keep_alive,
            upgrade=upgrade,
        )
        self.response = ResponseSide(tap, client, self, self.request)
        self.request.sink = self.response
        self._reads_seen = 0
        self._progress_at = self.request.last_activity

    # what the client connection sees

    def start(self) -> None:
        self.tap.exchanges.add(self)
        self.request.start()

    def request_body(self, data: bytes) -> None:
        self.request.body(data)

    def request_complete(self) -> None:
        """The client's request ended: send it. A bug on the way is a 502, never a stall: an
        error raised here would reach the request parser as a broken pipelined request, which
        is dropped without an answer (how a trailer held connections open, issue 19)."""
        try:
            self.request.end()
        except Exception:
            self.tap.warn("forward", "forwarding a request failed; answered 502")
            self.fail(502, "the tap could not forward the request")

    def hold_for_upgrade(self, early: bytes) -> None:
        self.request.hold_for_upgrade(early)

    def tunnel_from_client(self, data: bytes) -> None:
        self.request.tunnel_from_client(data)

    def client_paused(self, paused: bool) -> None:
        self.request.pause_upstream(paused)

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
        return self.response.head_written

    @property
    def upstream(self) -> UpstreamConnection | None:
        return self.request.upstream

    def idle_for(self, now: float) -> float:
        """Seconds since the last byte from the client or from vLLM, for the sweep that times
        out stalled exchanges. vLLM's reads are counted rather than timed (a clock read a chunk
        cost the hot path), so the sweep that sees their count move dates them: a stall is
        found between one timeout and one timeout plus two sweeps after its last byte."""
        reads = self.response.reads
        if reads != self._reads_seen:
            self._reads_seen = reads
            self._progress_at = now
        return now - max(self.request.last_activity, self._progress_at)

    @property
    def stage(self) -> Stage:
        if self.over:
            return Stage.DONE
        if self.response.head_done:
            return Stage.RESPONDING
        return Stage.WAITING if self.request.complete else Stage.RECEIVING

    # endings

    def finish(self) -> None:
        """The response is complete: record, recycle the upstream connection, free the client."""
        if self.over:
            return
        self.over = True
        self.tap.exchanges.discard(self)
        plan = self.request.plan
        if plan is not None:
            try:
                spec, ttft, tpot = self.response.outcome(self.request.done_at)
                record = RequestRecord(
                    self.request.label, plan.temperature_bucket, spec, ttft, tpot
                )
            except Exception:  # fail open: count it, unattributed
                record = RequestRecord(self.request.label, plan.temperature_bucket, None)
            self.tap.record(record)
        reusable = self.response.reusable and self.request.complete and not self.upgrade
        self.request.release_upstream(reusable)
        self.client.exchange_done(close=self.response.close_client)
        self._let_go()

    def upstream_lost(self) -> None:
        if self.over:
            return
        connection = self.request.detach_upstream()
        response = self.response
        if response.tunnel_open:
            self.cut()
        elif response.head_done and response.until_close:
            response.complete_body()
            response.flush()
            self.finish()
        elif self.request.can_retry(connection) and not response.started:
            response.forget_head()
            self.request.resend()
        else:
            if connection is not None and connection.reused and not response.started:
                self.tap.warn(
                    "not-resent",
                    "a reused connection to vLLM closed after a request was written, before any"
                    " answer; not sent again (vLLM may be running it): 502. Keep"
                    " --proxy-upstream-idle-timeout under vLLM's keep-alive",
                )
            self.fail(502, "vLLM closed the connection before the response was complete")

    def client_lost(self) -> None:
        """The client went away: drop the upstream connection so vLLM aborts the request."""
        if self.over:
            return
        self.over = True
        self.tap.exchanges.discard(self)
        self._record_failure()
        self.request.drop_upstream()
        self.request.cancel_connect()
        self._let_go()

    def timed_out(self) -> None:
        self.tap.warn("timeout", f"no data from vLLM or client for {self.tap.timeout:g} s")
        self.fail(504, "vLLM did not answer within the tap's timeout")

    def fail(self, status: int, message: str) -> None:
        """Give up: an error reply if nothing was sent yet, else cut the client connection."""
        if self.over:
            return
        self.response.write_error(status, message)
        self.cut()

    def cut(self) -> None:
        """Stop here: unattributed, vLLM's connection aborted, the client's closed."""
        self.over = True
        self.tap.exchanges.discard(self)
        self._record_failure()
        self.request.drop_upstream()
        self.client.exchange_done(close=True)
        self._let_go()

    def _let_go(self) -> None:
        """Ended: break the cycles among the exchange, its sides and the response parser. A
        connect still under way sees ``ENDED.over`` and returns its connection to the pool."""
        self.request.owner = self.response.owner = ENDED
        self.request.sink = None
        self.response.drop_parser()

    def _record_failure(self) -> None:
        plan = self.request.plan
        if plan is not None:
            self.tap.record(RequestRecord(self.request.label, plan.temperature_bucket, None))

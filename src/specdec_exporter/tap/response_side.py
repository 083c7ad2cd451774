"""The response side of an exchange: vLLM's bytes through the response parser, whose callbacks are
its methods. It decides how the body goes to the client (``downstream``) and what is inspected
(``inspection``), and says after each read what the exchange has to do: nothing, or one of the
verdicts below. It never ends the exchange itself.

The hot path: ``feed`` once per upstream read, one client write per read.
"""

from __future__ import annotations

import contextlib
from typing import Final

import httptools

from specdec_exporter.tap import http1
from specdec_exporter.tap.context import TapContext
from specdec_exporter.tap.downstream import CHUNKED, RAW, UNTIL_CLOSE, Downstream
from specdec_exporter.tap.http1 import MAX_HEAD_BYTES, NO_FIELDS, Fields, Framing, Headers
from specdec_exporter.tap.inspection import NO_OUTCOME, Inspection, Outcome, inspection_for
from specdec_exporter.tap.request_side import RequestSide

MORE: Final = 0
"""Nothing to do: more of the response is to come."""
ANSWERED: Final = 1
"""The response head arrived in this read: vLLM has answered (no retry from here on)."""
TUNNEL: Final = 2
"""vLLM answered 101 to an Upgrade: the tunnel is open."""
DONE: Final = 3
"""The response is complete and written."""
INVALID: Final = 4
"""vLLM's bytes are not a valid response (``failure`` says why): a 502, or a cut once answered."""
SURPLUS: Final = 5
"""Bytes past the end of a verbatim body, in a later read: the end cannot be placed, cut."""

SPENT_PARSER = httptools.HttpResponseParser(None)
"""What an ended response side holds instead of its parser, whose callbacks point back at it (a
reference cycle). Never fed: the upstream connection lets go of the exchange first."""


class SurplusResponseError(Exception):
    """vLLM sent bytes past the end of the response: raised to stop the response parser."""


class ResponseSide:
    """vLLM's answer to ``request``, read; written to the client through ``downstream``."""

    def __init__(self, context: TapContext, request: RequestSide, downstream: Downstream) -> None:
        self.context = context
        self.request = request
        self.downstream = downstream
        self.parser = httptools.HttpResponseParser(self)
        self.inspection: Inspection | None = None
        self.tunnel_open = False
        """vLLM answered 101: its bytes go to the client as they come."""
        self.head_done = False
        self.until_close = False
        """The body has no length: it ends when vLLM closes the connection."""
        self.close_client = False
        self.started = False
        """vLLM has begun an answer (no retry from here on)."""
        self.failure = ""
        """Why the response is ``INVALID``."""
        self._status = 0
        self._reason = b""
        self._response_headers: Headers = []
        self._fields = NO_FIELDS
        self._head_buffer = b""
        self._head_size = 0
        self._interim = False
        self._upstream_keep_alive = False
        self._response_done = False
        self._no_body = False
        self._surplus = False

    def feed(self, data: bytes) -> int:
        """One read from vLLM: parsed, relayed, and what the exchange has to do now."""
        downstream = self.downstream
        if self.tunnel_open:
            downstream.client.write(data)
            return MORE
        head_pending = not self.head_done
        if head_pending:
            self._head_buffer += data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the 101 answering an Upgrade request: what follows is the tunnel's
        except httptools.HttpParserError:
            if not self._response_done:
                return self._invalid("vLLM sent an invalid HTTP response")
            if not head_pending and downstream.framing is RAW:
                return SURPLUS  # its end is somewhere in this read: cannot be placed
            self._surplus = True  # bytes after the end of the response: dropped
        verdict = MORE
        if head_pending:
            if self.head_done:
                verdict = self._head_read_done()
            elif len(self._head_buffer) > MAX_HEAD_BYTES:
                return self._invalid("vLLM sent a response head over 64 KiB")
        elif downstream.framing is RAW:
            downstream.body(data)  # vLLM's bytes verbatim
        downstream.flush()
        return DONE if self._response_done else verdict

    def _invalid(self, failure: str) -> int:
        self.failure = failure
        return INVALID

    def _head_read_done(self) -> int:
        """The read that completed the response head: relay it and the body bytes it carried."""
        head, self._head_buffer = self._head_buffer, b""
        if self.tunnel_open:
            self.downstream.verbatim_head(head)
            return TUNNEL
        if self.downstream.framing is RAW:
            self._write_head()
            body_start = head.find(http1.HEAD_END) + len(http1.HEAD_END)
            self.downstream.body(self._raw_body(head, head[body_start:]))
        return ANSWERED

    def _raw_body(self, response: bytes, after_head: bytes) -> bytes:
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
        body = body_of(response)  # rare: re-read the response alone, then re-frame
        return (http1.chunk(body) if body else b"") + http1.LAST_CHUNK

    def end_body(self) -> None:
        """vLLM closed a body that ends at its close: end it towards the client, and write."""
        self._complete_body()
        self.downstream.flush()

    def drop_parser(self) -> None:
        """The exchange is over: the parser, whose callbacks are this side's methods, goes."""
        self.parser = SPENT_PARSER

    def forget_head(self) -> None:
        """The connection closed before any answer: the request goes again, on a new one."""
        self._head_buffer = b""

    def outcome(self) -> Outcome:
        """The metrics the response carried; TTFT and TPOT for a stream."""
        if self.inspection is None:
            return NO_OUTCOME
        return self.inspection.outcome(self.request.done_at, self.downstream.first_body_at)

    @property
    def reusable(self) -> bool:
        """vLLM's connection can carry another request, as far as this response goes."""
        return self._upstream_keep_alive and not self._surplus

    # the response parser's callbacks

    def on_message_begin(self) -> None:
        if self._response_done:
            raise SurplusResponseError  # a second response in the same read: stop parsing here
        self.started = True
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
        self._upstream_keep_alive = self.parser.should_keep_alive()
        fields = self._fields = Fields(self._response_headers)
        if b"transfer-encoding" in fields.names:
            self._check_transfer_coding(fields)
        chunked = fields.chunked()
        no_body = self._no_body = request.method == b"HEAD" or status in (204, 304)
        self.until_close = not no_body and not chunked and fields.content_length() is None
        inspection = self.inspection = inspection_for(
            request.plan, status, fields, self.context.inspect_limit
        )
        framing = self.downstream.framing = self._choose_framing(
            chunked, no_body, inspection is not None and inspection.undo is not None
        )
        self.close_client = (
            not request.client_keep_alive
            or self.until_close
            or framing is UNTIL_CLOSE
            or request.upgrade
            or not request.complete
            or self.downstream.client.refused
        )
        if framing is not RAW:
            self._write_head()
        if no_body:
            self._response_done = True

    def _check_transfer_coding(self, fields: Fields) -> None:
        """``Transfer-Encoding`` must be one field saying ``chunked``: any other coding, or
        ``chunked`` twice (a head relayed verbatim would carry both), is a parser error, so a
        502, as nginx answers both."""
        value = fields.value(b"transfer-encoding") or b""
        if value.strip().lower() != b"chunked" or fields.count(b"transfer-encoding") != 1:
            self.context.warn("transfer-coding", "vLLM sent a transfer coding but chunked: 502")
            raise ValueError("unknown transfer coding")

    def _switch_protocols(self) -> None:
        """vLLM answered 101: only valid for a request that asked for an Upgrade."""
        if not self.request.upgrade:
            raise ValueError("101 to a request without Upgrade")  # a parser error: 502
        self._status = 101
        self.head_done = self.tunnel_open = True

    def _choose_framing(self, chunked: bool, no_body: bool, rewritten: bool) -> Framing:
        if no_body:
            return RAW
        http10 = self.request.client_http10
        if rewritten or (chunked and http10) or self.until_close:
            return UNTIL_CLOSE if http10 or self.until_close else CHUNKED
        return RAW

    def _write_head(self) -> None:
        self.downstream.head(self._status, self._reason, self._fields, self.close_client)

    def on_body(self, data: bytes) -> None:
        """Once per body piece (the hot path, kept to few calls): inspect it, then relay it."""
        inspection = self.inspection
        if inspection is not None:
            try:  # watch for per-request metrics; in rewrite mode, take the bytes to pass on
                data = inspection.feed(data)
            except Exception:  # fail open: stop inspecting, keep passing bytes
                self.context.warn(
                    "inspect-response", "inspecting a response failed; passed on as is"
                )
                inspection.stop()
        downstream = self.downstream
        if downstream.framing is not RAW:
            downstream.body(data)

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
        rest = self.inspection.rest() if self.inspection is not None else b""
        self.downstream.end(rest)
        self._response_done = True


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

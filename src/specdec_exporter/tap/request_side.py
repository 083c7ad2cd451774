"""The request side of an exchange: the client's request as it goes to vLLM. Its body is buffered
up to the inspection cap (then planned: labels, the ``include_usage`` insertion) or streamed past
it; the head is built for vLLM; bytes the client sends after an Upgrade head are held until vLLM
answers.

It sends nothing itself: each step hands back the bytes to send upstream, and the exchange sends
them. It knows neither the exchange nor the response.
"""

from __future__ import annotations

import time

from specdec_exporter.tap import http1
from specdec_exporter.tap.context import TapContext
from specdec_exporter.tap.http1 import Fields
from specdec_exporter.tap.request import RequestPlan, plan_request, uninspected_plan
from specdec_exporter.tap.routes import is_inspected, upstream_target

MAX_HELD_BYTES = 64 * 1024
"""Client bytes held after an Upgrade head while vLLM decides; past this, reading pauses."""


class RequestSide:
    """The client's request on its way to vLLM."""

    def __init__(
        self,
        context: TapContext,
        method: bytes,
        target: bytes,
        *,
        fields: Fields,
        client_http10: bool,
        keep_alive: bool,
        upgrade: bool,
    ) -> None:
        self.context = context
        self.method = method
        self.target = target
        self.fields = fields
        self.client_http10 = client_http10
        self.client_keep_alive = keep_alive and not client_http10
        self.upgrade = upgrade
        self.expects_continue = fields.value(b"expect") == b"100-continue"
        self.inspected = is_inspected(method, target)
        self.plan: RequestPlan | None = None
        self.label = ""
        self.last_activity = time.monotonic()
        self.complete = False
        """The client's request has been read to its end."""
        self.done_at = 0.0
        self.streaming = False
        """The body is over the inspection cap: sent on as it arrives, not inspected."""
        self.request_bytes: bytes | None = None
        """A buffered request as sent upstream, kept for one retry until vLLM's answer begins."""
        self.tunneling = False
        """Client bytes after the head are not HTTP: held, then tunnelled or dropped."""
        self._declared_length = fields.content_length()
        self._has_body = self._declared_length is not None or fields.chunked()
        self._body: list[bytes] = []
        self._body_size = 0
        self._held: list[bytes] | None = None
        self._held_size = 0

    # the client's body: each step returns what to send upstream now

    def start(self) -> bytes:
        """The head at once when the declared body is over the cap; else nothing yet."""
        if self._declared_length is not None and self._declared_length > self.context.inspect_limit:
            return self._start_streaming()
        return b""

    def body(self, data: bytes) -> bytes:
        self.last_activity = time.monotonic()
        if self.streaming:
            return self._framed(data)
        self._body.append(data)
        self._body_size += len(data)
        if self._body_size > self.context.inspect_limit:
            return self._start_streaming()
        return b""

    def end(self) -> bytes:
        """The client's request is complete: the whole request (buffered), or its stream's end."""
        self.complete = True
        self.done_at = time.monotonic()
        if self.streaming:
            return http1.LAST_CHUNK if self._declared_length is None else b""
        body = b"".join(self._body)
        self._body = []
        if self.inspected:
            context = self.context
            try:
                self._set_plan(plan_request(body, context.buckets, context.default_temperature))
            except Exception:  # fail open: pass the request on unlabelled
                context.warn("inspect", "inspecting a request failed; passed on uninspected")
                self._set_plan(uninspected_plan(body))
            body = self.plan.body if self.plan is not None else body
        head = http1.request_head(
            self.method,
            self._upstream_target(),
            self.fields,
            len(body) if self._has_body else None,
            upgrade=self.upgrade,
            default_host=self.context.origin.authority,
        )
        self.request_bytes = head + body
        return self.request_bytes

    def _set_plan(self, plan: RequestPlan) -> None:
        self.plan = plan
        self.label = self.context.model_label(plan.model)

    def _start_streaming(self) -> bytes:
        """A body over the inspection cap: its head and what was buffered, then the rest as it
        arrives, not inspected."""
        self.streaming = True
        if self.inspected:
            self._set_plan(uninspected_plan(b""))
        head = http1.request_head(
            self.method,
            self._upstream_target(),
            self.fields,
            self._declared_length,
            chunked_body=self._declared_length is None,
            default_host=self.context.origin.authority,
        )
        buffered, self._body = b"".join(self._body), []
        return head + self._framed(buffered) if buffered else head

    def _framed(self, data: bytes) -> bytes:
        return http1.chunk(data) if self._declared_length is None else data

    def _upstream_target(self) -> bytes:
        return upstream_target(self.context.origin.path_prefix, self.target)

    def answered(self) -> None:
        """vLLM's answer has begun: no retry from here on, and a declined Upgrade's held bytes
        are never sent."""
        self.request_bytes = None
        self._held = None

    # Upgrade: client bytes after the head wait for vLLM's answer; only a 101 opens a pipe

    def hold_from(self, early: bytes) -> bool:
        """The request asked for an Upgrade: what follows its head is held until vLLM answers.
        True: over ``MAX_HELD_BYTES`` held, the client's reading pauses."""
        self.tunneling = True
        self._held = []
        return self.hold(early)

    def hold(self, data: bytes) -> bool:
        """Keep ``data`` for the tunnel (dropped once vLLM declined); True: reading pauses."""
        self.last_activity = time.monotonic()
        if self._held is None or not data:
            return False
        self._held.append(data)
        self._held_size += len(data)
        return self._held_size > MAX_HELD_BYTES

    def release_held(self) -> bytes:
        """vLLM answered 101: what the client sent meanwhile, to send on."""
        held, self._held = self._held or [], None
        return b"".join(held)

"""Faults on demand for /metrics: what is broken, until when, and the broken bodies themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

FaultKind = Literal["none", "slow", "500", "garbage", "truncated", "refuse", "html"]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "none",
    "slow",
    "500",
    "garbage",
    "truncated",
    "refuse",
    "html",
)
DEFAULT_FAULT_SECONDS = 30.0
TRUNCATE_FRACTION = 0.4

GARBAGE_BODY = (
    b"\x00\x1f\x8b\x08garbage\xff\xfe\n"
    b'vllm:spec_decode_num_drafts_total{engine="0" 12 NaN oops\n'
    b"# TYPE vllm:spec_decode_num_drafts_total countr\n"
    b"}}}{{{ not an exposition \xc3\x28\n"
)
HTML_BODY = (
    b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n"
    b'<body><h1>Authentication required</h1><form action="/login" method="post">'
    b'<input name="user"><input name="password" type="password"></form></body></html>\n'
)
ERROR_BODY = b"Internal Server Error"


@dataclass(frozen=True)
class Fault:
    """A fault active until ``until`` (monotonic seconds); ``delay`` is the slow fault's stall."""

    kind: FaultKind = "none"
    until: float = 0.0
    delay: float = 0.0

    def active(self, now: float) -> bool:
        return self.kind != "none" and now < self.until

    def as_json(self, now: float) -> dict[str, Any]:
        live = self.active(now)
        return {
            "kind": self.kind if live else "none",
            "remaining_seconds": max(0.0, self.until - now) if live else 0.0,
            "delay": self.delay if live and self.kind == "slow" else 0.0,
        }


def parse_fault(body: Any, now: float) -> Fault:
    """``{"kind": ..., "seconds": S, "delay": D}`` -> Fault; ValueError with a readable message."""
    if not isinstance(body, dict):
        raise ValueError('expected a JSON object like {"kind": "500", "seconds": 10}')
    kind = body.get("kind")
    if kind not in FAULT_KINDS:
        raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}")
    if kind == "none":
        return Fault()
    seconds = _non_negative(body.get("seconds", DEFAULT_FAULT_SECONDS), "seconds")
    delay = _non_negative(body.get("delay", seconds), "delay") if kind == "slow" else 0.0
    return Fault(kind=cast(FaultKind, kind), until=now + seconds, delay=delay)


def _non_negative(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name} must be a non-negative number")
    return float(value)


def truncated(body: bytes) -> bytes:
    """The first 40 % of the exposition, cut in the middle of a line."""
    cut = int(len(body) * TRUNCATE_FRACTION)
    line_end = body.rfind(b"\n", 0, cut)
    return body[: max(line_end + 1 + 20, cut)] if line_end >= 0 else body[:cut]

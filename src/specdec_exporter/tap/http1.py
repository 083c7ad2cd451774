"""HTTP/1.1 message heads for the tap: hop-by-hop filtering, framing, and its own error replies.

Pure: header lists in, bytes out.
"""

from __future__ import annotations

import json
from enum import Enum
from http import HTTPStatus

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
FRAMING = frozenset({b"content-length", b"transfer-encoding"})
CONTINUE_RESPONSE = b"HTTP/1.1 100 Continue\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"
HEAD_END = b"\r\n\r\n"
MAX_HEAD_BYTES = 64 * 1024
"""The largest request or response head the tap reads (a 400 from the client, a 502 from vLLM)."""


class Framing(Enum):
    """How the tap writes a response body to its client."""

    RAW = "raw"
    """Upstream's bytes verbatim, its framing (chunked or Content-Length) kept."""
    CHUNKED = "chunked"
    """The tap frames each piece as one chunk (the stream is rewritten)."""
    UNTIL_CLOSE = "until-close"
    """Bare body bytes, end marked by closing the connection (HTTP/1.0 clients, no length)."""


def header_value(headers: Headers, name: bytes) -> bytes | None:
    """The first value of a header (``name`` in lower case)."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def header_tokens(headers: Headers, name: bytes) -> frozenset[bytes]:
    """Comma-separated tokens of every ``name`` header, lower case (``Connection``, ``TE``)."""
    tokens: set[bytes] = set()
    for key, value in headers:
        if key.lower() == name:
            tokens.update(token.strip().lower() for token in value.split(b","))
    return frozenset(token for token in tokens if token)


def content_length(headers: Headers) -> int | None:
    """The declared body length; None when absent or unusable."""
    value = header_value(headers, b"content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def is_chunked(headers: Headers) -> bool:
    return b"chunked" in header_tokens(headers, b"transfer-encoding")


def end_to_end(headers: Headers, drop: frozenset[bytes] = frozenset()) -> Headers:
    """Headers without hop-by-hop ones, those named in ``Connection``, and ``drop``."""
    named = header_tokens(headers, b"connection")
    return [
        (key, value)
        for key, value in headers
        if (lowered := key.lower()) not in HOP_BY_HOP
        and lowered not in named
        and lowered not in drop
    ]


def render(first_line: bytes, headers: Headers) -> bytes:
    lines = [first_line, *(key + b": " + value for key, value in headers), b"", b""]
    return b"\r\n".join(lines)


def request_head(
    method: bytes,
    target: bytes,
    headers: Headers,
    body_length: int | None,
    *,
    chunked_body: bool = False,
    upgrade: bool = False,
    default_host: bytes = b"",
) -> bytes:
    """The head sent upstream (HTTP/1.1, keep-alive); the body framing is the tap's own.

    HTTP/1.1 requires ``Host``: always sent, the client's value (even when its ``Connection``
    header names ``Host``), else ``default_host`` (a request without one, as HTTP/1.0 allows).
    """
    if upgrade:
        kept = [(k, v) for k, v in headers if k.lower() not in FRAMING | {b"expect"}]
    else:
        kept = end_to_end(headers, FRAMING | {b"expect"})
    if header_value(kept, b"host") is None:
        host = header_value(headers, b"host")
        kept.insert(0, (b"Host", default_host if host is None else host))
    if body_length is not None:
        kept.append((b"Content-Length", b"%d" % body_length))
    elif chunked_body:
        kept.append((b"Transfer-Encoding", b"chunked"))
    return render(method + b" " + target + b" HTTP/1.1", kept)


def response_head(
    status: int, reason: bytes, headers: Headers, framing: Framing, close: bool
) -> bytes:
    """The head sent to the client for a response relayed with ``framing``."""
    if framing is Framing.RAW:
        kept = end_to_end(headers, FRAMING) + _framing_headers(headers)
    else:
        kept = end_to_end(headers, FRAMING)
        if framing is Framing.CHUNKED:
            kept.append((b"Transfer-Encoding", b"chunked"))
    if close:
        kept.append((b"Connection", b"close"))
    return render(b"HTTP/1.1 %d " % status + reason, kept)


def _framing_headers(headers: Headers) -> Headers:
    return [(key, value) for key, value in headers if key.lower() in FRAMING]


CHUNK = b"%x\r\n%b\r\n"
"""One chunk of a chunked body: ``CHUNK % (len(data), data)``."""


def chunk(data: bytes) -> bytes:
    return CHUNK % (len(data), data)


def error_response(status: int, message: str, close: bool = True, head: bool = False) -> bytes:
    """A complete response with an OpenAI-shaped error body, as vLLM writes its own.

    ``head``: the answer to a HEAD request, whose body is never sent (its length still is).
    """
    phrase = HTTPStatus(status).phrase
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": phrase.replace(" ", ""),
                "param": None,
                "code": status,
            }
        }
    ).encode()
    headers = [(b"Content-Type", b"application/json"), (b"Content-Length", b"%d" % len(body))]
    if close:
        headers.append((b"Connection", b"close"))
    return render(b"HTTP/1.1 %d %b" % (status, phrase.encode()), headers) + (b"" if head else body)

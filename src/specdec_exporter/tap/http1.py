"""HTTP/1.1 message heads for the tap: hop-by-hop filtering, framing, and its own error replies.

Pure: header lists in, bytes out.
"""

from __future__ import annotations

import json
from enum import Enum
from http import HTTPStatus
from typing import Final

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
REQUEST_FRAMING = FRAMING | {b"expect"}
"""Request headers the tap never forwards: it frames the body itself and answers Expect."""
REQUEST_HOP_BY_HOP = HOP_BY_HOP | REQUEST_FRAMING
RESPONSE_HOP_BY_HOP = HOP_BY_HOP | FRAMING
"""What the tap drops from each head before adding its own framing (plus what Connection names)."""
IDEMPOTENT_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})
"""RFC 9110 section 9.2.2: the requests a proxy may send again after vLLM may have read them."""
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


NO_TOKENS: frozenset[bytes] = frozenset()


class Fields:
    """A head's header fields as received, each name lower-cased once for all its lookups."""

    __slots__ = ("names", "pairs")

    def __init__(self, pairs: Headers) -> None:
        self.pairs = pairs
        self.names = [name.lower() for name, _ in pairs]

    def value(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` in lower case)."""
        names = self.names
        return self.pairs[names.index(name)][1] if name in names else None

    def count(self, name: bytes) -> int:
        return self.names.count(name)

    def tokens(self, name: bytes) -> frozenset[bytes]:
        """Comma-separated tokens of every ``name`` header, lower case (``Connection``, ``TE``)."""
        if name not in self.names:
            return NO_TOKENS
        tokens: set[bytes] = set()
        for lowered, (_, value) in zip(self.names, self.pairs, strict=True):
            if lowered == name:
                tokens.update(token.strip().lower() for token in value.split(b","))
        tokens.discard(b"")
        return frozenset(tokens)

    def content_length(self) -> int | None:
        """The declared body length; None when absent or unusable."""
        value = self.value(b"content-length")
        if value is None or not value.strip().isdigit():
            return None
        return int(value)

    def chunked(self) -> bool:
        return b"chunked" in self.tokens(b"transfer-encoding")

    def without(self, drop: frozenset[bytes]) -> Headers:
        """The fields whose names are not in ``drop``, in their order."""
        return [pair for name, pair in zip(self.names, self.pairs, strict=True) if name not in drop]

    def only(self, keep: frozenset[bytes]) -> Headers:
        """The fields whose names are in ``keep``, in their order."""
        return [pair for name, pair in zip(self.names, self.pairs, strict=True) if name in keep]

    def dropped(self, base: frozenset[bytes]) -> frozenset[bytes]:
        """``base`` and the fields this head's ``Connection`` names: what a proxy drops."""
        named = self.tokens(b"connection")
        return base | named if named else base


NO_FIELDS = Fields([])
"""A head not read yet."""


def render(first_line: bytes, headers: Headers) -> bytes:
    return b"\r\n".join([first_line, *[key + b": " + value for key, value in headers], b"", b""])


def request_head(
    method: bytes,
    target: bytes,
    fields: Fields,
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
    # with an Upgrade, Connection and Upgrade go on: vLLM answers the Upgrade
    drop = REQUEST_FRAMING if upgrade else fields.dropped(REQUEST_HOP_BY_HOP)
    kept = fields.without(drop)
    if b"host" in drop or b"host" not in fields.names:
        host = fields.value(b"host")
        kept.insert(0, (b"Host", default_host if host is None else host))
    if body_length is not None:
        kept.append((b"Content-Length", b"%d" % body_length))
    elif chunked_body:
        kept.append((b"Transfer-Encoding", b"chunked"))
    return render(method + b" " + target + b" HTTP/1.1", kept)


def response_head(
    status: int, reason: bytes, fields: Fields, framing: Framing, close: bool
) -> bytes:
    """The head sent to the client for a response relayed with ``framing``."""
    kept = fields.without(fields.dropped(RESPONSE_HOP_BY_HOP))
    if framing is Framing.RAW:
        kept += fields.only(FRAMING)  # vLLM's own framing: its bytes go on verbatim
    elif framing is Framing.CHUNKED:
        kept.append((b"Transfer-Encoding", b"chunked"))
    if close:
        kept.append((b"Connection", b"close"))
    return render(b"HTTP/1.1 %d " % status + reason, kept)


CRLF: Final = b"\r\n"
CHUNK_SIZE_LINES: Final = tuple(b"%x\r\n" % size for size in range(4096))
"""The size lines of chunks up to 4 KiB, made once: vLLM's chunks are a few hundred bytes, and
``%``-formatting one a chunk showed in the tap's profile (``_PyBytes_FormatEx``)."""


def chunk_size_line(size: int) -> bytes:
    """``<size in hex>\\r\\n``, the line that opens a chunk of a chunked body."""
    return CHUNK_SIZE_LINES[size] if size < len(CHUNK_SIZE_LINES) else b"%x\r\n" % size


def chunk(data: bytes) -> bytes:
    return chunk_size_line(len(data)) + data + CRLF


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

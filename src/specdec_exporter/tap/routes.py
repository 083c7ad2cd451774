"""Which requests the tap inspects, matched on the path as uvicorn and Starlette route it.

The target sent upstream is always the client's own bytes; only the match is normalised.
"""

from __future__ import annotations

from urllib.parse import unquote

import httptools

INSPECTED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
"""vLLM's OpenAI endpoints whose bodies and responses the tap reads (POST only)."""
_VERBATIM = frozenset(path.encode() for path in INSPECTED_PATHS)


def is_inspected(method: bytes, target: bytes) -> bool:
    """A ``POST`` that vLLM's router would send to an inspected endpoint."""
    if method != b"POST":
        return False
    return target in _VERBATIM or route_path(target) in INSPECTED_PATHS


def route_path(target: bytes) -> str | None:
    """The ``scope["path"]`` uvicorn's httptools protocol builds from a request target.

    As ``uvicorn/protocols/http/httptools_impl.py`` does: ``httptools.parse_url`` (an
    absolute-form target reduced to its path; query and fragment dropped), ASCII, then
    ``urllib.parse.unquote``. Slashes are not merged: Starlette routes ``//v1/...`` to a 404.
    None where uvicorn would not build a path (it answers those with an error).
    """
    try:
        path = httptools.parse_url(target).path
        text = path.decode("ascii") if path is not None else None
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        return None
    if text is None:
        return None
    return unquote(text) if "%" in text else text


def upstream_target(prefix: bytes, target: bytes) -> bytes:
    """The client's target with ``--vllm-url``'s path prefix in front of its path."""
    if not prefix or target == b"*":
        return target
    if target.startswith(b"/"):
        return prefix + target
    authority = target.find(b"://")
    if authority < 0:
        return target
    start = authority + 3
    ends = [index for mark in (b"/", b"?", b"#") if (index := target.find(mark, start)) >= 0]
    path = min(ends, default=len(target))
    return target[:path] + prefix + target[path:]

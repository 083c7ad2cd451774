"""Where the members of a JSON object sit in its bytes, found without decoding the document
(for byte-exact edits of request bodies: the ``include_usage`` insertion in ``request.py``), and
the tap's JSON decoding, straight through json's C scanner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JSON_SPACE = " \t\n\r"
"""The four characters JSON allows between tokens."""
_SPACE = re.compile(b"[%b]*" % JSON_SPACE.encode())
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"[^%b,\]}]+" % JSON_SPACE.encode())
_NESTED = re.compile(rb'["{}\[\]]')

_scan_once: Callable[[str, int], tuple[Any, int]] = getattr(  # noqa: B009  (not in typeshed)
    json.JSONDecoder(), "scan_once"
)
"""json's C scanner (one for every call): what ``JSONDecoder.raw_decode`` calls."""


def raw_decode(text: str, start: int = 0) -> tuple[Any, int]:
    """The JSON value at ``start`` of a str and where it ends: ``JSONDecoder.raw_decode``
    without its Python frame (the same values and errors)."""
    try:
        return _scan_once(text, start)
    except StopIteration as stop:
        raise json.JSONDecodeError("Expecting value", text, stop.value) from None


def loads(text: str) -> Any:
    """``json.loads`` of a str: the same values and the same rejections (a ValueError), straight
    through the C scanner. The tap decodes two documents a request; ``json.loads`` adds three
    Python calls and two regex matches to each, which cost most when the request path runs
    with cold caches among the chunks of other streams."""
    start = len(text) - len(text.lstrip(JSON_SPACE))
    value, end = raw_decode(text, start)
    if end < len(text) and text[end:].strip(JSON_SPACE):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


@dataclass(frozen=True, slots=True)
class Member:
    """One member of an object: its decoded key and where its value's bytes start and end."""

    key: str
    start: int
    end: int


def object_members(body: bytes, start: int = 0) -> list[Member] | None:
    """The members of the object at ``start`` (after whitespace), in order, duplicates kept.

    Meant for bodies ``json.loads`` accepted; None for anything it does not recognise.
    """
    try:
        return _members(body, _skip_space(body, start))
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _members(body: bytes, at: int) -> list[Member] | None:
    if body[at : at + 1] != b"{":
        return None
    members: list[Member] = []
    at = _skip_space(body, at + 1)
    if body[at : at + 1] == b"}":
        return members
    while True:
        if body[at : at + 1] != b'"':
            return None
        key_end = _string_end(body, at)
        key = _decode_key(body[at:key_end])
        at = _skip_space(body, key_end)
        if body[at : at + 1] != b":":
            return None
        start = _skip_space(body, at + 1)
        end = _value_end(body, start)
        members.append(Member(key, start, end))
        at = _skip_space(body, end)
        if body[at : at + 1] == b"}":
            return members
        if body[at : at + 1] != b",":
            return None
        at = _skip_space(body, at + 1)


def _skip_space(body: bytes, at: int) -> int:
    match = _SPACE.match(body, at)
    return match.end() if match else at


def _string_end(body: bytes, at: int) -> int:
    """One past the closing quote of the string whose opening quote is at ``at``."""
    match = _STRING_REST.match(body, at + 1)
    if match is None:
        raise ValueError("unterminated string")
    return match.end()


def _decode_key(raw: bytes) -> str:
    if b"\\" not in raw:
        return raw[1:-1].decode("utf-8")
    key = json.loads(raw)
    if not isinstance(key, str):
        raise ValueError("not a key")
    return key


def _value_end(body: bytes, at: int) -> int:
    first = body[at : at + 1]
    if first == b'"':
        return _string_end(body, at)
    if first in (b"{", b"["):
        return _nested_end(body, at)
    match = _SCALAR.match(body, at)
    if match is None:
        raise ValueError("no value")
    return match.end()


def _nested_end(body: bytes, at: int) -> int:
    """One past the bracket that closes the object or array opened at ``at``."""
    depth = 0
    while (match := _NESTED.search(body, at)) is not None:
        mark = match.group()
        if mark == b'"':
            at = _string_end(body, match.start())
            continue
        depth += 1 if mark in (b"{", b"[") else -1
        at = match.end()
        if depth == 0:
            return at
    raise ValueError("unterminated value")

"""SSE stream inspection: finds vLLM's final usage chunk, and can undo an added ``include_usage``.

Pure and incremental: feed body pieces as they arrive, get back the bytes to forward.

Marks are looked for with ``bytes.find``, not ``in``: CPython 3.11's ``bytes.__contains__`` first
tries its operand as an integer, so each ``mark in piece`` builds and drops a formatted TypeError
(measured in the tap's profile on every chunk). The marks are ``Final``: compiled, they are C
statics rather than a module-dict lookup each.
"""

from __future__ import annotations

from typing import Any, Final

from specdec_exporter.tap.jsonscan import loads, raw_decode

EVENT_END: Final = b"\n\n"
USAGE_MARK: Final = b'"usage":{'
FINISH_MARK: Final = b'"finish_reason":"'
"""A non-null finish reason; keys and quotes cannot occur unescaped inside JSON strings."""
FINGERPRINT_KEY: Final = b'"system_fingerprint":'
DATA_PREFIX: Final = b"data: "


class EventSplitter:
    """Cuts a byte stream at SSE event ends, holding back only an incomplete last event."""

    __slots__ = ("limit", "overflowed", "pending")

    def __init__(self, limit: int) -> None:
        self.pending = b""
        """The incomplete last event, held until its blank line."""
        self.limit = limit
        self.overflowed = False

    def split(self, piece: bytes) -> bytes:
        """The complete events now available (possibly empty); the rest is held."""
        data = self.pending + piece if self.pending else piece
        end = data.rfind(EVENT_END)
        if end < 0:
            self._hold(data)
            return b""
        end += len(EVENT_END)
        self.pending = data[end:]
        return data if end == len(data) else data[:end]

    def _hold(self, data: bytes) -> None:
        if len(data) > self.limit:
            self.overflowed = True
        self.pending = data

    def rest(self) -> bytes:
        rest, self.pending = self.pending, b""
        return rest


def iter_events(block: bytes) -> list[bytes]:
    """Complete events of a block, each with its blank line. Every byte is kept: in a block
    ending ``\n\n\n`` the splitter cut after the last pair, so the final ``\n`` is a piece too."""
    parts = block.split(EVENT_END)
    events = [part + EVENT_END for part in parts[:-1]]
    return [*events, parts[-1]] if parts[-1] else events


def blank_lines(event: bytes) -> int:
    """How many bytes of blank lines lead the event. SSE reads them as nothing; they appear
    when a stream has ``\n\n\n``, and whether they lead this event or trail the one before
    depends on where the stream was cut, so readers skip them and rewriters keep them."""
    return len(event) - len(event.lstrip(b"\n"))


def final_usage_chunk(event: bytes) -> dict[str, Any] | None:
    """The parsed chunk if the event is the final usage chunk (``"choices": []``), else None."""
    event = event[blank_lines(event) :]
    if not event.startswith(DATA_PREFIX):
        return None
    try:
        chunk = loads(event[len(DATA_PREFIX) :].decode("utf-8"))
    except ValueError:
        return None
    if isinstance(chunk, dict) and chunk.get("choices") == [] and "usage" in chunk:
        return chunk
    return None


def raw_member(event: bytes, key: bytes) -> bytes | None:
    """``key`` and its JSON value exactly as written in the event, or None (absent or null)."""
    start = event.find(key)
    if start < 0:
        return None
    after = start + len(key)
    try:
        text = event[after:].decode("utf-8")
        value, end = raw_decode(text)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return None if value is None else key + text[:end].encode("utf-8")


def with_member(event: bytes, member: bytes) -> bytes:
    """The event with ``member`` appended as the last key of its JSON object."""
    close = event.rfind(b"}")
    return event[:close] + b"," + member + event[close:] if close >= 0 else event


class UsageWatcher:
    """Watches a stream passed on unchanged for the final usage chunk."""

    __slots__ = ("final_chunk", "splitter")

    def __init__(self, limit: int) -> None:
        self.splitter = EventSplitter(limit)
        self.final_chunk: dict[str, Any] | None = None

    def feed(self, piece: bytes) -> None:
        splitter = self.splitter
        if splitter.overflowed:
            return
        if piece.find(USAGE_MARK) < 0 and not splitter.pending and piece.endswith(EVENT_END):
            return  # the common chunk: whole events (split would pass it as is), no usage
        block = splitter.split(piece)
        if block.find(USAGE_MARK) >= 0:
            for event in iter_events(block):
                chunk = final_usage_chunk(event) if event.find(USAGE_MARK) >= 0 else None
                if chunk is not None:
                    self.final_chunk = chunk


class IncludeUsageUndo:
    """Removes what ``include_usage`` changed in a vLLM stream, keeping every other byte.

    With ``include_usage`` vLLM adds a final chunk with ``"choices": []``, ``usage`` (and the
    per-request ``metrics``) and moves ``system_fingerprint`` from the finish chunk onto it. So
    an event with a finish reason is held until the usage chunk arrives; the usage chunk is
    dropped and its ``system_fingerprint`` member put back at the end of the held finish chunk.
    Complete events pass at once; only an incomplete event is held until its blank line.
    """

    __slots__ = ("_held", "final_chunk", "passthrough", "splitter")

    def __init__(self, limit: int) -> None:
        self.splitter = EventSplitter(limit)
        self.final_chunk: dict[str, Any] | None = None
        self._held: list[bytes] = []
        self.passthrough = False

    def feed(self, piece: bytes) -> bytes:
        """The bytes to forward for this piece (possibly empty)."""
        if self.passthrough:
            return piece
        if (
            not self._held
            and piece.find(FINISH_MARK) < 0
            and piece.find(USAGE_MARK) < 0
            and not self.splitter.pending
            and piece.endswith(EVENT_END)
        ):
            return piece  # the common chunk: whole events (split would pass it), none to change
        block = self.splitter.split(piece)
        if self.splitter.overflowed:  # not SSE as vLLM writes it: give up, forward everything
            self.passthrough = True
            return self._release(None) + block + self.splitter.rest()
        if not self._held and block.find(FINISH_MARK) < 0 and block.find(USAGE_MARK) < 0:
            return block
        return self._rewrite(block)

    def finish(self) -> bytes:
        """Whatever is still held when the stream ends (no usage chunk came)."""
        return self._release(None) + self.splitter.rest()

    def _rewrite(self, block: bytes) -> bytes:
        out: list[bytes] = []
        for event in iter_events(block):
            chunk = final_usage_chunk(event) if event.find(USAGE_MARK) >= 0 else None
            if chunk is not None and self.final_chunk is None:
                self.final_chunk = chunk
                out.append(self._release(raw_member(event, FINGERPRINT_KEY)))
                out.append(event[: blank_lines(event)])
            elif self._held or event.find(FINISH_MARK) >= 0:
                self._held.append(event)
            else:
                out.append(event)
        return b"".join(out)

    def _release(self, fingerprint: bytes | None) -> bytes:
        held, self._held = self._held, []
        if fingerprint is not None:
            held = [
                with_member(event, fingerprint)
                if event.find(FINISH_MARK) >= 0 and event.find(FINGERPRINT_KEY) < 0
                else event
                for event in held
            ]
        return b"".join(held)

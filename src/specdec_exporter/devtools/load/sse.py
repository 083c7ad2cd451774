"""Incremental Server-Sent Events decoding: bytes in, the ``data`` of each complete event out."""

from __future__ import annotations

DONE = b"[DONE]"


class SseDecoder:
    """Feed raw body bytes in any split; get back each event's data (lines joined by ``\\n``).

    Only ``data`` fields matter to an OpenAI-compatible stream; comments, ``event``, ``id``
    and ``retry`` lines are skipped. Lines may end in ``\\n`` or ``\\r\\n``.
    """

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._partial:
            chunk = self._partial + chunk
        lines = chunk.split(b"\n")
        self._partial = lines.pop()
        events: list[bytes] = []
        for line in lines:
            self._take_line(line, events)
        return events

    def close(self) -> list[bytes]:
        """The events left when the body ends without a final blank line."""
        events: list[bytes] = []
        if self._partial:
            self._take_line(self._partial, events)
            self._partial = b""
        self._take_line(b"", events)
        return events

    def _take_line(self, line: bytes, events: list[bytes]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            if self._data:
                events.append(self._data[0] if len(self._data) == 1 else b"\n".join(self._data))
                self._data = []
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)

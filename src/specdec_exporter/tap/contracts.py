"""What an exchange needs of the client connection, the tap and its owner: narrow Protocols, so
``exchange``, ``request_side`` and ``response_side`` never import ``proxy`` (nor the owner)."""

from __future__ import annotations

from typing import Protocol

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.tap.stats import RequestRecord
from specdec_exporter.tap.upstream import Origin, UpstreamPool


class ClientSide(Protocol):
    """The client connection an exchange answers (``proxy.ClientConnection``)."""

    @property
    def refused(self) -> bool:
        """A pipelined or broken request followed: the connection closes after this response."""
        ...

    def write(self, data: bytes) -> None: ...

    def pause_reading(self, paused: bool) -> None: ...

    def exchange_done(self, close: bool) -> None:
        """The exchange is over; ``close``: close the connection after what was written."""
        ...


class LiveExchange(Protocol):
    """What the tap's sweep needs of an exchange in flight."""

    def idle_for(self, now: float) -> float:
        """Seconds since the exchange's last byte, as far as the sweep at ``now`` can tell."""
        ...

    def timed_out(self) -> None: ...


class TapContext(Protocol):
    """What every exchange shares (``proxy.Tap``): settings, labels, stats, the upstream pool."""

    @property
    def buckets(self) -> TemperatureBuckets: ...

    @property
    def default_temperature(self) -> float | None: ...

    @property
    def inspect_limit(self) -> int: ...

    @property
    def timeout(self) -> float: ...

    @property
    def origin(self) -> Origin: ...

    @property
    def pool(self) -> UpstreamPool: ...

    @property
    def exchanges(self) -> set[LiveExchange]: ...

    def model_label(self, model: str | None) -> str: ...

    def record(self, record: RequestRecord) -> None: ...

    def warn(self, key: str, message: str) -> None: ...


class Endings(Protocol):
    """How the request side and the response side end the exchange that owns both."""

    @property
    def over(self) -> bool: ...

    def finish(self) -> None:
        """The response is complete."""
        ...

    def fail(self, status: int, message: str) -> None:
        """An error reply if nothing went to the client yet, else a cut connection."""
        ...

    def cut(self) -> None:
        """Stop at once and close the client connection."""
        ...

    def upstream_lost(self) -> None: ...

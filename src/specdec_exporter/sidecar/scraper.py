"""Fetch vLLM's /metrics over HTTP with a total timeout and a body cap; classify failures.

The cap holds for the decoded body as it streams: a gzip body is inflated here, a bounded piece at
a time, so a small compressed body that decodes to gigabytes never gets into memory.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

import httpx

from specdec_exporter.core.parse import ExpositionError, Snapshot, parse
from specdec_exporter.core.probe_parse import NO_PROBE, ProbeSnapshot, parse_probe
from specdec_exporter.deadline import total_deadline

FailureReason = Literal["connect", "timeout", "http_status", "parse", "too_large", "internal"]
FAILURE_REASONS: tuple[FailureReason, ...] = (
    "connect",
    "timeout",
    "http_status",
    "parse",
    "too_large",
    "internal",
)
"""Why a poll failed; ``internal``: a bug of the sidecar's in the poll's fold (vLLM answered),
counted and logged with its type and file:line (sidecar/poller.py)."""
ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5,*/*;q=0.1"
ACCEPT_ENCODING = "gzip"
"""prometheus_client (vLLM's /metrics) gzips when asked: a 60 KB page travels as ~8 KB."""
ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""Content-Encodings inflated here; identity passes as it is, anything else is refused."""
INFLATE_STEP = 1 << 20
"""Most decoded bytes one zlib call may return, so the peak stays near the cap, not twice it."""


class ScrapeError(Exception):
    """A scrape that produced no snapshot; `reason` is one of FAILURE_REASONS."""

    def __init__(self, reason: FailureReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: FailureReason = reason
        self.detail = detail


@dataclass(frozen=True)
class Scrape:
    snapshot: Snapshot
    duration: float
    probe: ProbeSnapshot = NO_PROBE
    """The engine probe's families, when vLLM's /metrics carries them."""


class Scraper:
    """One GET of `<vllm_url>/metrics`, parsed into a Snapshot."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        vllm_url: str,
        *,
        timeout: float,
        max_body_bytes: int,
        temperature_labels: Collection[str] | None = None,
    ) -> None:
        """``temperature_labels``: the only probe temperature buckets read (the sidecar's own);
        others are invalid series (``foreign_bucket``), never mirrored. None: any."""
        self._temperature_labels = temperature_labels
        self._client = client
        self._url = vllm_url.rstrip("/") + "/metrics"
        self._timeout = timeout
        self._max_body_bytes = max_body_bytes

    async def scrape(self) -> Scrape:
        started = time.perf_counter()
        try:
            async with total_deadline(self._timeout):
                body = await self._fetch()
        except httpx.TimeoutException:
            detail = f"no complete answer within {self._timeout:g} s"
            raise ScrapeError("timeout", detail) from None
        except httpx.HTTPError as exc:
            raise ScrapeError("connect", f"{type(exc).__name__}: {exc}") from None
        try:
            text = body.decode("utf-8")
            del body  # the text is all parse needs
            snapshot = parse(text)
            probe = parse_probe(text, self._temperature_labels)
        except (UnicodeDecodeError, ExpositionError) as exc:
            raise ScrapeError("parse", str(exc)) from None
        return Scrape(snapshot, time.perf_counter() - started, probe)

    async def _fetch(self) -> bytearray:
        headers = {"Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING}
        async with self._client.stream(
            "GET", self._url, headers=headers, timeout=self._timeout
        ) as response:
            if response.status_code != 200:
                raise ScrapeError("http_status", f"HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self._max_body_bytes:
                raise ScrapeError("too_large", f"Content-Length {declared} over the cap")
            body = CappedBody(response.headers.get("content-encoding", ""), self._max_body_bytes)
            async for raw in response.aiter_raw():  # raw: httpx would inflate a whole read at once
                body.feed(raw)
            return body.finish()


class CappedBody:
    """A response body decoded as it arrives, raising ``too_large`` before the decoded size
    (or the raw size) passes ``cap``; never holds more than the cap plus one INFLATE_STEP."""

    def __init__(self, content_encoding: str, cap: int) -> None:
        encoding = content_encoding.strip().lower()
        if encoding not in ("", "identity", *ZLIB_WBITS):
            raise ScrapeError("parse", f"unsupported Content-Encoding {encoding[:40]!r}")
        self._wbits = ZLIB_WBITS.get(encoding)
        self._inflater = None if self._wbits is None else zlib.decompressobj(self._wbits)
        self._cap = cap
        self._raw_size = 0
        self._body = bytearray()

    def feed(self, raw: bytes) -> None:
        self._raw_size += len(raw)
        if self._raw_size > self._cap:
            raise ScrapeError("too_large", f"body over {self._cap} bytes")
        if self._inflater is None:
            self._append(raw)
            return
        try:
            self._inflate(raw)
        except zlib.error as exc:
            raise ScrapeError("parse", f"bad compressed body: {exc}") from None

    def _inflate(self, data: bytes) -> None:
        assert self._inflater is not None and self._wbits is not None
        while data:
            if self._inflater.eof:  # another gzip member follows
                self._inflater = zlib.decompressobj(self._wbits)
            step = min(self._cap - len(self._body) + 1, INFLATE_STEP)
            self._append(self._inflater.decompress(data, step))
            eof = self._inflater.eof
            data = self._inflater.unused_data if eof else self._inflater.unconsumed_tail

    def _append(self, decoded: bytes) -> None:
        if len(self._body) + len(decoded) > self._cap:
            raise ScrapeError("too_large", f"decoded body over {self._cap} bytes")
        self._body += decoded

    def finish(self) -> bytearray:
        if self._inflater is not None and not self._inflater.eof:
            raise ScrapeError("parse", "compressed body cut short")
        return self._body

"""Fetch vLLM's /metrics over HTTP with a total timeout and a body cap; classify failures.

The cap holds for the decoded body as it streams: a gzip body is inflated here, a bounded piece at
a time, so a small compressed body that decodes to gigabytes never gets into memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Literal

import httpx

from specdec_exporter.core.parse import ExpositionError, Snapshot, parse
from specdec_exporter.core.probe_parse import NO_PROBE, ProbeSnapshot, parse_probe
from specdec_exporter.deadline import total_deadline
from specdec_exporter.probe import files as probe_files

LOG = logging.getLogger(__name__)

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
ProbeFilesFailure = Literal["timeout", "error"]
PROBE_FILES_FAILURES: tuple[ProbeFilesFailure, ...] = ("timeout", "error")
"""Why a poll could not read the engine probe's files (``--probe-dir``): no read within the
scrape timeout, or an OS or decoding error. The poll goes on, the probe's last reading held."""
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
    """The engine probe's families, from its files (``probe_dir``; their last reading while
    they cannot be read) or vLLM's /metrics."""
    probe_files_failure: ProbeFilesFailure | None = None
    """Why this poll could not read the probe's files (None: read, or no ``probe_dir``)."""


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
        probe_dir: str | None = None,
    ) -> None:
        """``temperature_labels``: the only probe temperature buckets read (the sidecar's own);
        others are invalid series (``foreign_bucket``), never mirrored. None: any.
        ``probe_dir``: the engine probe's own files (``probe/files.py``); the probe's families
        come from there while a live file is there, else from vLLM's /metrics."""
        self._probe_dir = probe_dir
        self._probe_dir_problem: str | None = None
        self._files_probe: ProbeSnapshot | None = None
        """The probe as its files showed it at the last poll that read it from them (None: the
        last poll read no live file, or took the probe from vLLM's /metrics)."""
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
        except (UnicodeDecodeError, ExpositionError) as exc:
            raise ScrapeError("parse", str(exc)) from None
        try:
            probe, files_failure = await self._probe(text)
        except ExpositionError as exc:
            raise ScrapeError("parse", str(exc)) from None
        return Scrape(snapshot, time.perf_counter() - started, probe, files_failure)

    async def _probe(self, text: str) -> tuple[ProbeSnapshot, ProbeFilesFailure | None]:
        """The probe's families: from its files while a live one is there, else from vLLM's
        /metrics (``text``); and why its files could not be read this poll. Files that cannot be
        read (a timeout, an error) are not a probe that went away: unless /metrics shows the
        probe, its last reading from the files is held (so nothing it counted is counted twice
        when they can be read again, and nothing is lost: its counters are cumulative)."""
        if self._probe_dir is None:
            return parse_probe(text, self._temperature_labels), None
        failure, files_text = await self._probe_files_text()
        if files_text is not None:
            self._files_probe = parse_probe(files_text, self._temperature_labels)
            return self._files_probe, None
        on_metrics = parse_probe(text, self._temperature_labels)
        if failure is None or on_metrics.info is not None or self._files_probe is None:
            self._files_probe = None
            return on_metrics, failure
        # held: its invalid series counted once
        return replace(self._files_probe, invalid=()), failure

    async def _probe_files_text(self) -> tuple[ProbeFilesFailure | None, str | None]:
        """Why the probe's files could not be read (None: they could), and their series (None:
        none is live, or they could not be read; one line says why, once a cause)."""
        assert self._probe_dir is not None
        failure: ProbeFilesFailure | None = None
        try:
            body = await asyncio.wait_for(
                asyncio.to_thread(probe_files.read, self._probe_dir, self._max_body_bytes),
                self._timeout,
            )
            text = None if body is None else body.decode("utf-8")
            problem = None
        except TimeoutError:
            failure, text, problem = "timeout", None, f"no read within {self._timeout:g} s"
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            failure, text, problem = "error", None, f"{type(exc).__name__}: {exc}"
        if problem != self._probe_dir_problem:
            if problem is not None:
                LOG.warning(
                    "engine probe files in %s unreadable (%s); until they can be read, the "
                    "probe's last reading from them is held (its series from vLLM's /metrics "
                    "if vLLM shows them there)",
                    self._probe_dir,
                    problem,
                )
            else:
                LOG.info("engine probe files in %s readable again", self._probe_dir)
            self._probe_dir_problem = problem
        return failure, text

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

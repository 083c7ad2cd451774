"""Fetch vLLM's /metrics over HTTP with a total timeout and a body cap; classify failures."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

import httpx

from specdec_exporter.core.exposition import ExpositionError, Snapshot, parse

FailureReason = Literal["connect", "timeout", "http_status", "parse", "too_large"]
FAILURE_REASONS: tuple[FailureReason, ...] = (
    "connect", "timeout", "http_status", "parse", "too_large",
)
ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5,*/*;q=0.1"


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


class Scraper:
    """One GET of `<vllm_url>/metrics`, parsed into a Snapshot."""

    def __init__(self, client: httpx.AsyncClient, vllm_url: str, *, timeout: float,
                 max_body_bytes: int) -> None:
        self._client = client
        self._url = vllm_url.rstrip("/") + "/metrics"
        self._timeout = timeout
        self._max_body_bytes = max_body_bytes

    async def scrape(self) -> Scrape:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout):
                body = await self._fetch()
        except (TimeoutError, httpx.TimeoutException):
            detail = f"no complete answer within {self._timeout:g} s"
            raise ScrapeError("timeout", detail) from None
        except httpx.HTTPError as exc:
            raise ScrapeError("connect", f"{type(exc).__name__}: {exc}") from None
        try:
            snapshot = parse(body.decode("utf-8"))
        except (UnicodeDecodeError, ExpositionError) as exc:
            raise ScrapeError("parse", str(exc)) from None
        return Scrape(snapshot, time.perf_counter() - started)

    async def _fetch(self) -> bytes:
        async with self._client.stream(
            "GET", self._url, headers={"Accept": ACCEPT}, timeout=self._timeout
        ) as response:
            if response.status_code != 200:
                raise ScrapeError("http_status", f"HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self._max_body_bytes:
                raise ScrapeError("too_large", f"Content-Length {declared} over the cap")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self._max_body_bytes:
                    raise ScrapeError("too_large", f"body over {self._max_body_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)

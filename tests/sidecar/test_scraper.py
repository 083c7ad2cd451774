"""The scraper over HTTP (httpx.MockTransport): every failure gets its reason."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from specdec_exporter.sidecar.scraper import ScrapeError, Scraper
from variants import capture

pytestmark = pytest.mark.anyio


def scraper_for(handler: httpx.MockTransport, timeout: float = 1.0,
                max_body_bytes: int = 1 << 20) -> Scraper:
    client = httpx.AsyncClient(transport=handler)
    return Scraper(client, "http://vllm:8000/", timeout=timeout, max_body_bytes=max_body_bytes)


def answer(status: int = 200, body: bytes = b"", **headers: str) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(status, content=body,
                                                              headers=headers))


async def test_success_parses_the_snapshot() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=capture("t3"))

    scrape = await scraper_for(httpx.MockTransport(handler)).scrape()
    assert scrape.snapshot.counters[("meta-llama/Llama-3.1-8B-Instruct", "0")].drafts == 7380.0
    assert seen[0].url == "http://vllm:8000/metrics"
    assert seen[0].headers["accept"].startswith("text/plain")


@pytest.mark.parametrize(
    ("transport", "reason"),
    [
        (answer(500, b"Internal Server Error"), "http_status"),
        (answer(404), "http_status"),
        (answer(200, b"<html><body>login</body></html>\n"), "parse"),
        (answer(200, b"\xff\xfe\x00garbage"), "parse"),
        (answer(200, capture("t3").encode()[:5000]), "parse"),
        (answer(200, b"x" * 20_000), "too_large"),
        (answer(200, b"x", **{"content-length": "999999999"}), "too_large"),
    ],
    ids=["500", "404", "html", "garbage", "truncated", "too-large-body", "too-large-declared"],
)
async def test_failures_are_classified(transport: httpx.MockTransport, reason: str) -> None:
    with pytest.raises(ScrapeError) as caught:
        await scraper_for(transport, max_body_bytes=10_000).scrape()
    assert caught.value.reason == reason


async def test_connection_refused_is_connect() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ScrapeError) as caught:
        await scraper_for(httpx.MockTransport(refuse)).scrape()
    assert caught.value.reason == "connect"


async def test_slow_vllm_is_timeout() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, text=capture("t3"))

    with pytest.raises(ScrapeError) as caught:
        await scraper_for(httpx.MockTransport(slow), timeout=0.05).scrape()
    assert caught.value.reason == "timeout"

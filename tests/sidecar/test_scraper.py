"""The scraper over HTTP (httpx.MockTransport): every failure gets its reason."""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from specdec_exporter.probe import files as probe_files
from specdec_exporter.probe.families import Families
from specdec_exporter.probe.files import ProbeFiles
from specdec_exporter.sidecar.scraper import Scrape, ScrapeError, Scraper
from variants import MODEL, capture

pytestmark = pytest.mark.anyio


def scraper_for(
    handler: httpx.MockTransport, timeout: float = 1.0, max_body_bytes: int = 1 << 20
) -> Scraper:
    client = httpx.AsyncClient(transport=handler)
    return Scraper(client, "http://vllm:8000/", timeout=timeout, max_body_bytes=max_body_bytes)


def streamed(status: int, body: bytes, **headers: str) -> httpx.Response:
    """A response whose body streams as a server's does (``content=`` would preload it)."""
    headers.setdefault("content-length", str(len(body)))
    return httpx.Response(status, stream=httpx.ByteStream(body), headers=headers)


def answer(status: int = 200, body: bytes = b"", **headers: str) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: streamed(status, body, **headers))


async def test_success_parses_the_snapshot() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return streamed(200, capture("t3").encode())

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


class Pieces(httpx.AsyncByteStream):
    """A body that arrives `size` bytes a read, as over a slow network."""

    def __init__(self, body: bytes, size: int) -> None:
        self._body, self._size = body, size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._body), self._size):
            yield self._body[start : start + self._size]


T3 = capture("t3").encode()
T3_DRAFTS = 7380.0


def gzip_members(*parts: bytes) -> bytes:
    return b"".join(gzip.compress(part) for part in parts)


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(T3)),
        ("x-gzip", gzip.compress(T3)),
        ("deflate", zlib.compress(T3)),
        ("GZIP", gzip.compress(T3)),
        ("identity", T3),
        ("gzip", gzip_members(T3[:1000], T3[1000:])),
    ],
    ids=["gzip", "x-gzip", "deflate", "upper-case", "identity", "two-gzip-members"],
)
@pytest.mark.parametrize("piece", [7, 65536])
async def test_compressed_bodies_are_inflated_as_they_stream(
    encoding: str, body: bytes, piece: int
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, stream=Pieces(body, piece), headers={"content-encoding": encoding}
        )

    scrape = await scraper_for(httpx.MockTransport(handler)).scrape()
    assert scrape.snapshot.counters[(MODEL, "0")].drafts == T3_DRAFTS
    assert seen[0].headers["accept-encoding"] == "gzip"


def bomb(decoded: int) -> bytes:
    """A gzip body of `decoded` zero bytes (about 1/1000 of that on the wire)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(decoded >> 20)]
    return b"".join(parts) + compressor.flush()


@pytest.mark.parametrize(
    ("encoding", "body", "reason"),
    [
        ("gzip", bomb(64 << 20), "too_large"),
        ("gzip", gzip.compress(T3)[:-20], "parse"),
        ("gzip", b"\x1f\x8b" + b"\x00" * 50, "parse"),
        ("deflate", T3, "parse"),
        ("br", T3, "parse"),
        ("gzip, gzip", T3, "parse"),
    ],
    ids=["bomb", "cut-short", "corrupt", "not-deflate", "brotli", "stacked"],
)
async def test_bad_compressed_bodies_are_classified(
    encoding: str, body: bytes, reason: str
) -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(
            200, stream=Pieces(body, 65536), headers={"content-encoding": encoding}
        )
    )
    with pytest.raises(ScrapeError) as caught:
        await scraper_for(transport, max_body_bytes=1 << 20).scrape()
    assert caught.value.reason == reason


def probe_writing(folder: Path, drafts: int) -> ProbeFiles:
    """A probe in this process, its series in ``folder`` (as in vLLM with SPECDEC_PROBE_DIR)."""
    files = ProbeFiles(str(folder))
    families = Families(CollectorRegistry(), files)
    families.set_info("0.1.0", "0.32.0", {})
    families.temperature_series("m", "0", 4).drafts.inc(drafts)
    return files


async def test_the_probe_is_read_from_its_files_while_one_is_live(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM's /metrics carries no probe series with SPECDEC_PROBE_DIR; the scraper reads them
    from the folder, falls back to /metrics when no live file is there or it cannot be read
    (one line, once), and reads the folder again when it can."""
    on_metrics = capture("t3") + PROBE_ON_METRICS
    client = httpx.AsyncClient(transport=answer(200, on_metrics.encode()))
    folder = tmp_path / "probe"
    folder.mkdir()
    scraper = Scraper(
        client, "http://vllm:8000/", timeout=1.0, max_body_bytes=1 << 20, probe_dir=str(folder)
    )

    def drafts(scrape: Scrape) -> float:
        return scrape.probe.temperature[("m", "0")].totals.drafts

    assert drafts(await scraper.scrape()) == 1  # no live file: vLLM's /metrics
    files = probe_writing(folder, 7)
    try:
        first = await scraper.scrape()
        assert drafts(first) == 7 and first.probe.temperature_split
        assert first.snapshot.counters  # vLLM's own figures, from /metrics as ever
        folder.rename(tmp_path / "elsewhere")
        with caplog.at_level("WARNING", logger="specdec_exporter.sidecar.scraper"):
            assert drafts(await scraper.scrape()) == 1
            assert drafts(await scraper.scrape()) == 1
        lines = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
        assert len(lines) == 1 and "FileNotFoundError" in lines[0]
        (tmp_path / "elsewhere").rename(folder)
        assert drafts(await scraper.scrape()) == 7
    finally:
        files.close()
    assert drafts(await scraper.scrape()) == 1  # the writer gone: its files are not read


PROBE_ON_METRICS = """\
# TYPE specdec_probe_info gauge
specdec_probe_info{version="0.1.0",vllm_version="0.32.0",temperature_split="on",\
batch_split="on",reason=""} 1.0
# TYPE specdec_probe_drafts_total counter
specdec_probe_drafts_total{model_name="m",temperature_bucket="0"} 1.0
"""


async def test_files_that_cannot_be_read_for_a_poll_hold_the_probes_last_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """In files mode vLLM's /metrics shows no probe: a poll whose read of the files fails (an
    error, a timeout) is not a probe that went away, which the split would take for a restart
    and count again in full when the files came back. The last reading is held (one line
    says so); what the probe counted meanwhile comes with the next read."""
    client = httpx.AsyncClient(transport=answer(200, capture("t3").encode()))
    folder = tmp_path / "probe"
    folder.mkdir()
    scraper = Scraper(
        client, "http://vllm:8000/", timeout=0.2, max_body_bytes=1 << 20, probe_dir=str(folder)
    )
    assert not (await scraper.scrape()).probe.temperature_split  # nothing yet: no probe at all
    files = ProbeFiles(str(folder))
    families = Families(CollectorRegistry(), files)
    families.set_info("0.1.0", "0.32.0", {})
    families.temperature_series("m", "0", 4).drafts.inc(7)
    reads = iter([OSError("EIO"), "slow", None, OSError("EIO")])
    real_read = probe_files.read

    def failing_read(where: str, cap: int) -> bytes | None:
        fault = next(reads, None)
        if isinstance(fault, OSError):
            raise fault
        if fault == "slow":
            time.sleep(0.5)
        return real_read(where, cap)

    try:
        assert (await scraper.scrape()).probe.temperature[("m", "0")].totals.drafts == 7
        monkeypatch.setattr(probe_files, "read", failing_read)
        with caplog.at_level("WARNING", logger="specdec_exporter.sidecar.scraper"):
            for why in ("error", "timeout"):  # held, and the poll says why
                scrape = await scraper.scrape()
                held = scrape.probe
                assert held.temperature_split and held.temperature[("m", "0")].totals.drafts == 7
                assert scrape.probe_files_failure == why
            families.temperature_series("m", "0", 4).drafts.inc(2)
            scrape = await scraper.scrape()
            assert scrape.probe.temperature[("m", "0")].totals.drafts == 9
            assert scrape.probe_files_failure is None
            scrape = await scraper.scrape()
            assert scrape.probe.temperature[("m", "0")].totals.drafts == 9
            assert scrape.probe_files_failure == "error"
        warned = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
        assert len(warned) == 3 and all("held" in line for line in warned), warned
    finally:
        files.close()
    assert not (await scraper.scrape()).probe.temperature_split  # the writer gone: no probe

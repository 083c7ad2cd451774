"""A gzip bomb costs the scraper at most about its cap in memory: measured in a child process
(peak RSS, VmHWM) against a local server that sends 1 GiB of zeros as a ~1 MiB gzip body."""

from __future__ import annotations

import contextlib
import gzip
import json
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from variants import capture

CAP = 16 << 20  # the default max_body_bytes
DECODED = 1 << 30
CHILD = r"""
import asyncio, json, sys
import httpx
from specdec_exporter.sidecar.scraper import ScrapeError, Scraper

def peak_kib():
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0])

async def main(base, cap):
    async with httpx.AsyncClient(trust_env=False) as client:
        await Scraper(client, base + "/plain", timeout=30, max_body_bytes=cap).scrape()  # warm up
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # reset the peak to the current RSS
        before = peak_kib()
        try:
            await Scraper(client, base + "/bomb", timeout=30, max_body_bytes=cap).scrape()
            reason = None
        except ScrapeError as failure:
            reason = failure.reason
        print(json.dumps({"reason": reason, "increase_kib": peak_kib() - before}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def gzip_of_zeros(size: int) -> bytes:
    """A gzip body of `size` zero bytes built from one compressed MiB (a full flush makes each
    MiB's deflate output identical), so building it costs no gigabyte of compression."""
    mib = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    segment = compressor.compress(mib) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size >> 20):
        crc = zlib.crc32(mib, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return header + segment * (size >> 20) + compressor.flush() + trailer


@contextmanager
def serving(bodies: dict[str, tuple[bytes, str]]) -> Iterator[str]:
    """GET <path>/metrics answers bodies[path] = (bytes, content-encoding)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, encoding = bodies[self.path.removesuffix("/metrics")]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)  # the scraper may hang up at its cap

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def scrape_in_child(bodies: dict[str, tuple[bytes, str]]) -> dict[str, object]:
    with serving(bodies) as base:
        result = subprocess.run(
            [sys.executable, "-c", CHILD, base, str(CAP)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout)
    return found


def test_the_bomb_is_built_right() -> None:
    body = gzip_of_zeros(3 << 20)
    assert zlib.decompress(body, 16 + zlib.MAX_WBITS) == bytes(3 << 20)


def test_a_gzip_bomb_raises_peak_rss_by_less_than_twice_the_cap() -> None:
    bomb = gzip_of_zeros(DECODED)
    assert len(bomb) < 1_100_000
    plain = capture("t3").encode()
    found = scrape_in_child({"/plain": (plain, "identity"), "/bomb": (bomb, "gzip")})
    assert found["reason"] == "too_large"
    increase = int(found["increase_kib"]) * 1024  # type: ignore[call-overload]
    assert increase < 2 * CAP, f"peak RSS rose by {increase / 2**20:.1f} MiB"


@pytest.mark.parametrize("encode", [gzip.compress, bytes], ids=["gzip", "identity"])
def test_a_body_just_under_the_cap_still_parses(encode: Callable[[bytes], bytes]) -> None:
    plain = capture("t3").encode()
    padded = plain + b"#" * (CAP - len(plain) - 1) + b"\n"  # a comment line up to the cap
    encoding = "gzip" if encode is gzip.compress else "identity"
    found = scrape_in_child({"/plain": (plain, "identity"), "/bomb": (encode(padded), encoding)})
    assert found["reason"] is None

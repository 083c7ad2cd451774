"""Peak RSS increase of one scrape of a gzip bomb (1 GiB of zeros in a ~1 MiB body) under the
16 MiB body cap: the Scraper against the same loop on httpx's own decoding (the code before),
each in a fresh child process (VmHWM after clear_refs).

Run: .venv/bin/python benchmarks/scrape_bomb.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "sidecar")]

from test_scraper_memory import CAP, DECODED, gzip_of_zeros, serving  # noqa: E402

from variants import capture  # noqa: E402

CHILD = r"""
import asyncio, json, sys, time
import httpx
from specdec_exporter.sidecar.scraper import ScrapeError, Scraper

def peak_kib():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])

async def httpx_decoding(client, url, cap):
    # The scraper before: httpx inflates each read, the size is checked after.
    async with client.stream("GET", url) as response:
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                return "too_large"
    return None

async def scraper(client, url, cap):
    try:
        await Scraper(client, url.removesuffix("/metrics"), timeout=60, max_body_bytes=cap).scrape()
    except ScrapeError as failure:
        return failure.reason
    return None

async def main(mode, base, cap):
    fetch = {"httpx": httpx_decoding, "scraper": scraper}[mode]
    async with httpx.AsyncClient(trust_env=False) as client:
        await fetch(client, base + "/plain/metrics", cap)  # warm up
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        before = peak_kib()
        started = time.process_time()
        reason = await fetch(client, base + "/bomb/metrics", cap)
        cpu = time.process_time() - started
        print(json.dumps({"reason": reason, "increase_kib": peak_kib() - before, "cpu": cpu}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    bomb = gzip_of_zeros(DECODED)
    bodies = {"/plain": (capture("t3").encode(), "identity"), "/bomb": (bomb, "gzip")}
    results: dict[str, list[dict[str, float]]] = {"httpx": [], "scraper": []}
    with serving(bodies) as base:
        for _ in range(args.repeat):
            for mode, runs in results.items():
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, mode, base, str(CAP)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                runs.append(json.loads(out))
    print(f"bomb: {len(bomb):,} bytes on the wire, {DECODED:,} decoded; cap {CAP >> 20} MiB")
    print("| decoding | reason | peak RSS increase MiB (max of runs) | x cap | CPU s |")
    print("|---|---|---:|---:|---:|")
    for mode, runs in results.items():
        peak = max(run["increase_kib"] for run in runs) / 1024
        cpu = min(run["cpu"] for run in runs)
        print(
            f"| {mode} | {runs[0]['reason']} | {peak:.1f} | {peak / (CAP >> 20):.2f} | {cpu:.3f} |"
        )


if __name__ == "__main__":
    main()

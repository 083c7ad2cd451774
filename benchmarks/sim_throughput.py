"""Streamed chunks per second that the simulator plus an async httpx client sustain together.

Starts `specdec-exporter simulate` in its own process, runs N concurrent streaming chat requests
(include_usage, mixed temperatures) for a fixed time, and reports chunks/s, tokens/s and the CPU
the simulator used per chunk (from /proc/<pid>/stat). Example:

    .venv/bin/python benchmarks/sim_throughput.py --concurrency 64 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass

import httpx
from simulator_process import start_simulator

TEMPERATURES = (0.0, 0.3, 0.7, 1.0)
SPEC_FLAGS = [
    "--speculative-config",
    '{"method": "ngram", "num_speculative_tokens": 4}',
    "--per-request-spec-decode-metrics",
    "summary",
]
EVENT_END = b"\n\n"


@dataclass
class Totals:
    chunks: int = 0
    tokens: int = 0
    requests: int = 0
    errors: int = 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def worker(
    client: httpx.AsyncClient, index: int, deadline: float, max_tokens: int, totals: Totals
) -> None:
    number = 0
    while time.monotonic() < deadline:
        body = {
            "messages": [{"role": "user", "content": "Tell me about speculative decoding."}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": TEMPERATURES[(index + number) % len(TEMPERATURES)],
            "ignore_eos": True,
        }
        number += 1
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                tail = b""
                async for raw in response.aiter_raw():
                    data = tail + raw
                    totals.chunks += data.count(EVENT_END)
                    tail = data[-1:]
                totals.tokens += max_tokens
                totals.requests += 1
        except httpx.HTTPError:
            totals.errors += 1


async def run_load(url: str, concurrency: int, seconds: float, max_tokens: int) -> Totals:
    totals = Totals()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0) as client:
        deadline = time.monotonic() + seconds
        await asyncio.gather(
            *(worker(client, i, deadline, max_tokens, totals) for i in range(concurrency))
        )
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--speed", type=float, default=1.0, help="simulator --speed")
    args = parser.parse_args()
    process, url = start_simulator([*SPEC_FLAGS, "--speed", str(args.speed)])
    try:
        server_cpu = cpu_seconds(process.pid)
        client_cpu = time.process_time()
        started = time.monotonic()
        totals = asyncio.run(run_load(url, args.concurrency, args.seconds, args.max_tokens))
        elapsed = time.monotonic() - started
        server_cpu = cpu_seconds(process.pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
        truth = httpx.get(f"{url}/sim/ground-truth").json()["total"]
    finally:
        process.terminate()
        process.wait(timeout=10)
    # A completed stream also carries the role chunk, the usage chunk and [DONE].
    content_chunks = totals.chunks - 3 * totals.requests
    report = {
        "concurrency": args.concurrency,
        "seconds": round(elapsed, 2),
        "requests": totals.requests,
        "errors": totals.errors,
        "sse_events_per_second": round(totals.chunks / elapsed),
        "content_chunks_per_second": round(content_chunks / elapsed),
        "tokens_per_second": round(totals.tokens / elapsed),
        "server_cpu_us_per_chunk": round(server_cpu / max(content_chunks, 1) * 1e6, 1),
        "client_cpu_us_per_chunk": round(client_cpu / max(content_chunks, 1) * 1e6, 1),
        "acceptance_rate": round(truth["accepted_tokens"] / max(truth["draft_tokens"], 1), 3),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CPU cost per streamed chunk of ``specdec-exporter load``, against a trivial local SSE server.

The server (this file with ``--serve``) runs in a child process on 127.0.0.1 and streams
vLLM-shaped chat chunks (~230 bytes, one HTTP chunk each, optionally paced); the load generator
runs in this process, so ``time.process_time()`` around ``run_load`` is its whole CPU cost.
Prints one JSON object per run. The machine is shared: take the median of a few runs. Example:

    .venv/bin/python benchmarks/load_throughput.py --concurrency 64 --interval 0.01 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.parse import StreamTally
from specdec_exporter.devtools.load.results import LoadResult
from specdec_exporter.devtools.load.runner import run_load
from specdec_exporter.devtools.load.sse import SseDecoder

CONTENT_CHUNK = (
    b'{"id":"chatcmpl-bench0000000000","object":"chat.completion.chunk","created":1795323868,'
    b'"model":"bench","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,'
    b'"finish_reason":null,"token_ids":null}]}'
)
USAGE_CHUNK = (
    b'{"id":"chatcmpl-bench0000000000","object":"chat.completion.chunk","created":1795323868,'
    b'"model":"bench","choices":[],"usage":{"prompt_tokens":10,"total_tokens":%d,'
    b'"completion_tokens":%d},"metrics":{"speculative_decoding":{"mean_acceptance_length":2.0,'
    b'"draft_acceptance_rate":0.25,"acceptance_histogram":[1,1,0,0,0],"num_spec_steps":2,'
    b'"num_accepted_draft_tokens":1,"num_draft_tokens":8,"num_spec_tokens":4}}}'
)


def http_chunk(payload: bytes) -> bytes:
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunks: int, interval: float
) -> None:
    content, done = http_chunk(CONTENT_CHUNK), http_chunk(b"[DONE]")
    usage = http_chunk(USAGE_CHUNK % (chunks + 10, chunks))
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for _ in range(chunks):
                writer.write(content)
                await (asyncio.sleep(interval) if interval else writer.drain())
            writer.write(usage + done + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(chunks: int, interval: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: serve_connection(r, w, chunks, interval), "127.0.0.1", 0, backlog=1024
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def process_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(chunks: int, interval: float) -> tuple[subprocess.Popen[str], int]:
    command = [
        sys.executable,
        __file__,
        "--serve",
        "--chunks",
        str(chunks),
        "--interval",
        str(interval),
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, int(child.stdout.readline())


def parse_cost_per_chunk(chunks: int, repeat: int) -> float:
    """Seconds of CPU per chunk for the pure part only: SSE decoding plus chunk accounting."""
    body = b"".join(b"data: " + p + b"\n\n" for p in [CONTENT_CHUNK] * chunks) + b"data: [DONE]\n\n"
    pieces = [body[i : i + 300] for i in range(0, len(body), 300)]
    started = time.process_time()
    for _ in range(repeat):
        decoder, tally = SseDecoder(), StreamTally(0.0)
        for piece in pieces:
            for payload in decoder.feed(piece):
                tally.add(payload, 1.0)
    return (time.process_time() - started) / (repeat * chunks)


def run_client(config: LoadConfig, loop: str) -> LoadResult:
    if loop == "uvloop":
        import uvloop  # noqa: PLC0415 (optional, measured on request)

        return uvloop.run(run_load(config))
    return asyncio.run(run_load(config))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    child, port = start_server(args.chunks, args.interval)
    try:
        config = LoadConfig(
            url=f"http://127.0.0.1:{port}",
            model="bench",
            concurrency=args.concurrency,
            requests=args.requests,
            mix=parse_mix("0.7"),
            stream_share=1.0,
            seed=1,
        )
        server_cpu, cpu, wall = process_cpu_seconds(child.pid), time.process_time(), time.time()
        result = run_client(config, args.loop)
        cpu, wall = time.process_time() - cpu, time.time() - wall
        server_cpu = process_cpu_seconds(child.pid) - server_cpu
    finally:
        child.terminate()
        child.wait()
    chunks = sum(request.chunks for request in result.results)
    return {
        "loop": args.loop,
        "concurrency": args.concurrency,
        "interval_s": args.interval,
        "requests": len(result.results),
        "succeeded": result.succeeded,
        "chunks": chunks,
        "wall_s": round(wall, 3),
        "chunks_per_s": round(chunks / wall),
        "client_cpu_us_per_chunk": round(cpu / chunks * 1e6, 1),
        "client_cpu_share_of_one_core": round(cpu / wall, 3),
        "client_chunks_per_cpu_second": round(chunks / cpu),
        "parse_only_us_per_chunk": round(parse_cost_per_chunk(args.chunks, 200) * 1e6, 2),
        "server_cpu_us_per_chunk": round(server_cpu / chunks * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--chunks", type=int, default=64, help="content chunks per stream")
    parser.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="server pause between chunks of one stream (0: as fast as it can)",
    )
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="uvloop",
        help="client event loop (the CLI uses uvloop where installed)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs, one JSON line each")
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.chunks, args.interval))
        return
    for _ in range(args.repeat):
        print(json.dumps(measure(args)), flush=True)


if __name__ == "__main__":
    main()

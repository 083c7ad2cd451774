"""Tap cost on loopback: added time to first token (P50/P99 at 1 and 64 streams) and CPU per
1,000 streamed chunks of the tap process, against direct and nginx (the pass-through reference).

    .venv/bin/python benchmarks/tap_latency_cpu.py            # full run, ~2 minutes
    .venv/bin/python benchmarks/tap_latency_cpu.py --quick    # smoke run, ~20 s

Each server runs in its own process: a paced raw-asyncio SSE upstream shaped like vLLM (one
~230-byte chunk per step), the tap (uvloop), nginx (1 worker, proxy_buffering off, upstream
keepalive). The load client is another process. CPU comes from /proc/<pid>/stat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tap_common import (
    HERE,
    Nginx,
    chat_request,
    cpu_seconds,
    cpu_split,
    free_port,
    install_uvloop,
    run_load,
    serve_upstream,
    spawn,
    stop,
    wait_for_port,
)

KINDS = {
    "rewrite": chat_request(stream=True),  # the common client: no include_usage
    "passthrough": chat_request(stream=True, include_usage=True),
}


@dataclass(frozen=True)
class Scenario:
    target: str
    concurrency: int
    per_connection: int
    kind: str


def serve_tap(port: int, upstream_port: int) -> None:
    from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.sidecar.config import Settings  # noqa: PLC0415
    from specdec_exporter.tap.proxy import run_tap  # noqa: PLC0415
    from specdec_exporter.tap.stats import RequestStats  # noqa: PLC0415

    install_uvloop()
    settings = Settings(vllm_url=f"http://127.0.0.1:{upstream_port}",
                        proxy_listen=f"127.0.0.1:{port}")
    stats = RequestStats(TemperatureBuckets(settings.temperature_buckets), lambda _: 4)
    asyncio.run(run_tap(settings, stats, lambda: frozenset({"bench"})))


def load_once(port: int, concurrency: int, per_connection: int, kind: str,
              stagger: float) -> dict[str, float]:
    install_uvloop()
    result = asyncio.run(run_load(port, concurrency, per_connection, KINDS[kind], stagger))
    return result.summary()


def measure(scenario: Scenario, port: int, pids: list[int], shape: list[str]
            ) -> dict[str, float]:
    """Run the load in its own process; the target's CPU is read around it."""
    warm = ["load", "--port", str(port), "--concurrency", str(scenario.concurrency),
            "--per-connection", "1", "--kind", scenario.kind, *shape]
    subprocess.run([sys.executable, str(HERE.parent / "tap_latency_cpu.py"), *warm],
                   check=True, capture_output=True)
    before = cpu_seconds(pids)
    args = ["load", "--port", str(port), "--concurrency", str(scenario.concurrency),
            "--per-connection", str(scenario.per_connection), "--kind", scenario.kind, *shape]
    output = subprocess.run([sys.executable, str(HERE.parent / "tap_latency_cpu.py"), *args],
                            check=True, capture_output=True, text=True).stdout
    used = cpu_seconds(pids) - before
    result: dict[str, float] = json.loads(output)
    events = max(1, int(result["events"]))
    result["cpu_seconds"] = round(used, 3)
    result["cpu_us_per_chunk"] = round(used / events * 1e6, 2)
    result["chunks_per_second"] = round(events / result["seconds"], 1)
    return result


def scenarios(quick: bool) -> list[Scenario]:
    one, many = (15, 6) if quick else (60, 25)
    rows = []
    for target in ("direct", "tap", "nginx"):
        rows.append(Scenario(target, 1, one, "rewrite"))
        rows.append(Scenario(target, 64, many, "rewrite"))
    rows.append(Scenario("tap", 64, many, "passthrough"))
    rows.append(Scenario("nginx", 64, many, "passthrough"))
    return rows


def orchestrate(quick: bool, chunks: int, interval_ms: float, stagger: bool, pin: bool) -> None:
    shape = ["--chunks", str(chunks), "--interval-ms", str(interval_ms)]
    if not stagger:
        shape.append("--no-stagger")
    proxy_cpus, load_cpus = cpu_split() if pin else (None, None)
    if load_cpus:
        os.sched_setaffinity(0, load_cpus)  # inherited by the load client processes
    upstream_port, tap_port = free_port(), free_port()
    upstream = spawn(str(HERE.parent / "tap_latency_cpu.py"), "upstream", "--port",
                     str(upstream_port), "--chunks", str(chunks), "--interval-ms",
                     str(interval_ms), cpus=load_cpus)
    tap = spawn(str(HERE.parent / "tap_latency_cpu.py"), "tap", "--port", str(tap_port),
                "--upstream-port", str(upstream_port), cpus=proxy_cpus)
    nginx = None
    try:
        wait_for_port(upstream_port)
        wait_for_port(tap_port)
        nginx = Nginx(upstream_port, proxy_cpus)
        targets = {"direct": (upstream_port, [upstream.pid]), "tap": (tap_port, [tap.pid]),
                   "nginx": (nginx.port, nginx.pids())}
        results = []
        for scenario in scenarios(quick):
            port, pids = targets[scenario.target]
            row = {"target": scenario.target, "streams": scenario.concurrency,
                   "kind": scenario.kind, **measure(scenario, port, pids, shape)}
            results.append(row)
            print(json.dumps(row), flush=True)
        print_table(results)
    finally:
        if nginx is not None:
            nginx.stop()
        stop(tap)
        stop(upstream)


def print_table(results: list[dict[str, object]]) -> None:
    from specdec_exporter.term import render_table  # noqa: PLC0415

    direct = {row["streams"]: row for row in results if row["target"] == "direct"}
    rows = []
    for row in results:
        base = direct[row["streams"]]
        added50 = float(row["ttft_p50_ms"]) - float(base["ttft_p50_ms"])  # type: ignore[arg-type]
        added99 = float(row["ttft_p99_ms"]) - float(base["ttft_p99_ms"])  # type: ignore[arg-type]
        cpu = None if row["target"] == "direct" else row["cpu_us_per_chunk"]
        rows.append([row["target"], row["kind"], row["streams"], row["requests"],
                     row["errors"], row["ttft_p50_ms"], row["ttft_p99_ms"], round(added50, 3),
                     round(added99, 3), row["chunks_per_second"], cpu])
    print()
    print(render_table(["target", "client", "streams", "requests", "errors", "ttft p50 ms",
                        "ttft p99 ms", "added p50", "added p99", "chunks/s",
                        "proxy cpu us/chunk"], rows))  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", nargs="?", default="run",
                        choices=["run", "upstream", "tap", "load"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--port", type=int)
    parser.add_argument("--upstream-port", type=int)
    parser.add_argument("--chunks", type=int, default=50, help="content chunks per stream")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="pace between chunks")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--per-connection", type=int, default=10)
    parser.add_argument("--kind", choices=sorted(KINDS), default="rewrite")
    parser.add_argument("--no-stagger", dest="stagger", action="store_false",
                        help="start all streams at once (phase-aligned bursts)")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="do not put the proxy alone on the last CPU")
    args = parser.parse_args()
    if args.role == "upstream":
        install_uvloop()
        asyncio.run(serve_upstream(args.port, args.chunks, args.interval_ms / 1000))
    elif args.role == "tap":
        serve_tap(args.port, args.upstream_port)
    elif args.role == "load":
        stagger = (args.chunks + 2) * args.interval_ms / 1000 if args.stagger else 0.0
        print(json.dumps(load_once(args.port, args.concurrency, args.per_connection, args.kind,
                                   stagger)))
    else:
        orchestrate(args.quick, args.chunks, args.interval_ms, args.stagger, args.pin)


if __name__ == "__main__":
    main()

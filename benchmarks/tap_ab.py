"""Two versions of the tap on loopback, alternating in one run: CPU per chunk at 64 streams.

    .venv/bin/python benchmarks/tap_ab.py A_SRC B_SRC                  # 6 pairs, rewrite, ~3 min
    .venv/bin/python benchmarks/tap_ab.py A_SRC B_SRC --pairs 8 --kind passthrough

A_SRC and B_SRC are src/ trees (another checkout from ``git archive``, or a copy compiled by
``scripts/compile_tap.sh``). Both taps run at once, each pinned alone on the last core while it is
measured, in front of one upstream, and take turns (A B, B A, A B, ...) so that a load change on
the machine falls on both. The socket-free ``tap_chunk_cpu.py`` compares the tap's own code; this
one also sees what only a live process shows: memory freed late, caches gone cold between one
request and the next. Prints each round, then the medians and the median of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from pathlib import Path

from tap_common import cpu_split, free_port, spawn, stop, wait_for_port
from tap_latency_cpu import SCRIPT, Scenario, measure, per_connection, spawn_proxy

STREAMS = 64
SHAPE = ("--chunks", "50", "--interval-ms", "10")
"""As tap_latency_cpu.py's defaults: 50 content chunks a stream, one every 10 ms."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs=2, type=Path, metavar="SRC")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--kind", choices=("rewrite", "passthrough"), default="rewrite")
    args = parser.parse_args()
    proxy_cpus, load_cpus = cpu_split()
    if load_cpus:
        os.sched_setaffinity(0, load_cpus)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    upstream_port = free_port()
    processes = [spawn(SCRIPT, "upstream", "--port", str(upstream_port), *SHAPE, cpus=load_cpus)]
    taps: list[tuple[int, subprocess.Popen[bytes]]] = []
    for source in args.sources:
        port = free_port()
        tap = spawn_proxy("tap", port, upstream_port, proxy_cpus, source)
        processes.append(tap)
        taps.append((port, tap))
    rounds: list[list[dict[str, float]]] = [[], []]
    try:
        for port in [upstream_port, *(port for port, _ in taps)]:
            wait_for_port(port)
        scenario = Scenario("tap", STREAMS, per_connection(False)[1], args.kind)
        for number in range(args.pairs):
            for which in (0, 1) if number % 2 == 0 else (1, 0):
                port, tap = taps[which]
                row = measure(scenario, port, [tap.pid], list(SHAPE))
                rounds[which].append(row)
                print(
                    f"pair {number + 1} {'AB'[which]}: {row['cpu_us_per_chunk']:.2f} µs a chunk "
                    f"({row['user_us_per_chunk']:.2f} user), P99 TTFT {row['ttft_p99_ms']:.3f} ms",
                    flush=True,
                )
    finally:
        for process in processes:
            stop(process)
    for which, source in enumerate(args.sources):
        rows = rounds[which]
        print(
            f"{'AB'[which]} {source}: median {median(rows, 'cpu_us_per_chunk'):.2f} µs a chunk, "
            f"user {median(rows, 'user_us_per_chunk'):.2f}, P99 TTFT "
            f"{median(rows, 'ttft_p99_ms'):.3f} ms"
        )
    ratios = [
        b["cpu_us_per_chunk"] / a["cpu_us_per_chunk"]
        for a, b in zip(rounds[0], rounds[1], strict=True)
    ]
    pairs = ", ".join(f"{ratio:.2f}" for ratio in ratios)
    print(f"B / A, CPU per chunk: {statistics.median(ratios):.3f}x (pairs: {pairs})")
    print(f"load average at end: {os.getloadavg()}")


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


if __name__ == "__main__":
    main()

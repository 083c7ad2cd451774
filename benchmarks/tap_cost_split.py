"""Where the tap's CPU goes on loopback: a fixed cost per request and a cost per content chunk,
for the tap and for nginx, at 64 streams.

    .venv/bin/python benchmarks/tap_cost_split.py                      # ~8 minutes
    .venv/bin/python benchmarks/tap_cost_split.py --tap-src DIR        # the tap from another src/

Each proxy's CPU per request is measured with short streams (``--short`` content chunks) and
long ones (``--long``), rounds interleaved; a straight line through the two medians gives
``CPU per request = fixed + per_chunk * content chunks``. tap_latency_cpu.py's goal figure
(CPU per chunk at 50 chunks) mixes the two; this splits them, so a change can be aimed at the
part that is actually larger than nginx's.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from tap_common import Nginx, cpu_split, free_port, spawn, stop_all, wait_for_port
from tap_latency_cpu import SCRIPT, Scenario, measure, spawn_proxy

STREAMS = 64
PER_CONNECTION = 25
ROOT = Path(__file__).resolve().parents[1]


def per_request(
    tap_src: Path, chunks: int, rounds: int, cpus: tuple[set[int] | None, set[int] | None]
) -> dict[str, list[tuple[float, float]]]:
    """(CPU, user) µs per request of the tap and of nginx, ``rounds`` times each."""
    proxy_cpus, load_cpus = cpus
    shape = ["--chunks", str(chunks), "--interval-ms", "10"]
    upstream_port, tap_port = free_port(), free_port()
    processes = [spawn(SCRIPT, "upstream", "--port", str(upstream_port), *shape, cpus=load_cpus)]
    tap = spawn_proxy("tap", tap_port, upstream_port, proxy_cpus, tap_src)
    processes.append(tap)
    results: dict[str, list[tuple[float, float]]] = {"tap": [], "nginx": []}
    nginx: Nginx | None = None
    try:
        wait_for_port(upstream_port)
        wait_for_port(tap_port)
        nginx = Nginx(upstream_port, proxy_cpus)
        targets = {"tap": (tap_port, [tap.pid]), "nginx": (nginx.port, nginx.pids())}
        for number in range(rounds):
            for name, (port, pids) in targets.items():
                row = measure(Scenario(name, STREAMS, PER_CONNECTION, "rewrite"), port, pids, shape)
                requests = STREAMS * PER_CONNECTION
                results[name].append(
                    (
                        row["cpu_us_per_chunk"] * row["events"] / requests,
                        row["user_us_per_chunk"] * row["events"] / requests,
                    )
                )
                cpu, user = results[name][-1]
                print(
                    f"{chunks} chunks, round {number + 1}, {name}: "
                    f"{cpu:.1f} µs a request ({user:.1f} user)",
                    flush=True,
                )
    finally:
        stop_all(processes, nginx)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tap-src", type=Path, default=ROOT / "src")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--short", type=int, default=5, help="content chunks of a short stream")
    parser.add_argument("--long", type=int, default=50, help="content chunks of a long stream")
    args = parser.parse_args()
    cpus = cpu_split()
    if cpus[1]:
        os.sched_setaffinity(0, cpus[1])
    print(f"load average at start: {os.getloadavg()}", flush=True)
    short = per_request(args.tap_src, args.short, args.rounds, cpus)
    long = per_request(args.tap_src, args.long, args.rounds, cpus)
    span = args.long - args.short
    for name in ("tap", "nginx"):
        lines = []
        for index, label in ((0, "CPU"), (1, "user")):
            low = statistics.median(row[index] for row in short[name])
            high = statistics.median(row[index] for row in long[name])
            per_chunk = (high - low) / span
            lines.append(f"{label}: {low - per_chunk * args.short:.1f} + {per_chunk:.2f} x chunks")
        print(f"{name} µs a request = " + "; ".join(lines))
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()

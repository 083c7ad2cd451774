"""How far above the floor of a Python proxy the tap is, and how much of that is HTTP parsing:
CPU per chunk at 64 streams of a uvloop TCP pipe that parses nothing, the same pipe running every
response read through httptools (what the tap parses with), the tap, and nginx.

    .venv/bin/python benchmarks/tap_floor.py                    # 4 rounds, ~5 minutes
    .venv/bin/python benchmarks/tap_floor.py --tap-src DIR      # the tap from another src/

The four take turns, round after round, each pinned alone on the last core while measured (the
other three idle there), in front of one paced upstream. The gap between the parsing pipe and the
tap is what the tap does beyond parsing: inspecting, re-framing, and Python's dispatch of it.
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
PROXIES = ("pipe", "parsing-pipe", "tap")
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tap-src", type=Path, default=ROOT / "src")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    proxy_cpus, load_cpus = cpu_split()
    if load_cpus:
        os.sched_setaffinity(0, load_cpus)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    shape = ["--chunks", "50", "--interval-ms", "10"]
    upstream_port = free_port()
    processes = [spawn(SCRIPT, "upstream", "--port", str(upstream_port), *shape, cpus=load_cpus)]
    targets: dict[str, tuple[int, list[int]]] = {}
    nginx: Nginx | None = None
    try:
        for role in PROXIES:
            port = free_port()
            src = args.tap_src if role == "tap" else None
            processes.append(spawn_proxy(role, port, upstream_port, proxy_cpus, src))
            targets[role] = (port, [processes[-1].pid])
        for port in (upstream_port, *(port for port, _ in targets.values())):
            wait_for_port(port)
        nginx = Nginx(upstream_port, proxy_cpus)
        targets["nginx"] = (nginx.port, nginx.pids())
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
        for number in range(args.rounds):
            for name, (port, pids) in targets.items():
                row = measure(Scenario(name, STREAMS, PER_CONNECTION, "rewrite"), port, pids, shape)
                results[name].append((row["cpu_us_per_chunk"], row["user_us_per_chunk"]))
                print(
                    f"round {number + 1}, {name}: {row['cpu_us_per_chunk']:.2f} µs a chunk "
                    f"({row['user_us_per_chunk']:.2f} user)",
                    flush=True,
                )
    finally:
        stop_all(processes, nginx)
    pipe = statistics.median(cpu for cpu, _ in results["pipe"])
    for name, rows in results.items():
        cpu = statistics.median(value for value, _ in rows)
        user = statistics.median(value for _, value in rows)
        print(f"{name}: median {cpu:.2f} µs a chunk ({user:.2f} user), {cpu / pipe:.2f}x the pipe")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()

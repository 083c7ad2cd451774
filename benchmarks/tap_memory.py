"""Tap memory over 100,000 requests: RSS of the tap process must stay flat (within 10 MB).

    .venv/bin/python benchmarks/tap_memory.py                  # 100,000 requests, ~1-2 minutes
    .venv/bin/python benchmarks/tap_memory.py --requests 20000 # shorter

Mixed traffic in phases (streams rewritten for include_usage, streams passed through,
non-streaming JSON, a distinct model name per request); RSS from /proc/<pid>/status.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tap_common import (
    HERE,
    chat_request,
    free_port,
    install_uvloop,
    rss_bytes,
    run_load,
    spawn,
    stop,
    wait_for_port,
)

MIB = 1024 * 1024
CONCURRENCY = 32
WARM_UP = 5_000


def distinct_models() -> Callable[[], bytes]:
    counter = itertools.count()
    return lambda: chat_request(stream=True, temperature=0.3, model=f"m{next(counter)}")


PHASES: list[tuple[str, Callable[[], bytes]]] = [
    ("stream, include_usage added and undone", lambda: chat_request(stream=True)),
    ("stream, client's include_usage", lambda: chat_request(stream=True, include_usage=True)),
    ("non-streaming JSON", lambda: chat_request(stream=False, temperature=0.0)),
    ("stream, a new model name each", distinct_models()),
]


async def drive(port: int, pid: int, total: int) -> list[tuple[str, int, float]]:
    rows = []
    warm = await run_load(port, CONCURRENCY, WARM_UP // CONCURRENCY, chat_request(stream=True))
    baseline = rss_bytes(pid)
    rows.append(("after warm-up", warm.requests, baseline / MIB))
    done = warm.requests
    per_phase = total // (2 * len(PHASES))
    for name, request in PHASES * 2:
        result = await run_load(port, CONCURRENCY, per_phase // CONCURRENCY, request)
        done += result.requests
        if result.errors:
            raise RuntimeError(f"{result.errors} errors in phase {name!r}")
        rows.append((name, done, rss_bytes(pid) / MIB))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100_000)
    args = parser.parse_args()
    upstream_port, tap_port = free_port(), free_port()
    upstream = spawn(
        str(HERE.parent / "tap_latency_cpu.py"),
        "upstream",
        "--port",
        str(upstream_port),
        "--chunks",
        "5",
        "--interval-ms",
        "0",
    )
    tap = spawn(
        str(HERE.parent / "tap_latency_cpu.py"),
        "tap",
        "--port",
        str(tap_port),
        "--upstream-port",
        str(upstream_port),
    )
    try:
        wait_for_port(upstream_port)
        wait_for_port(tap_port)
        install_uvloop()
        rows = asyncio.run(drive(tap_port, tap.pid, args.requests))
    finally:
        stop(tap)
        stop(upstream)
    from specdec_exporter.term import render_table  # noqa: PLC0415

    baseline = rows[0][2]
    print(
        render_table(
            ["phase", "requests so far", "tap RSS MiB", "growth MiB"],
            [(name, count, rss, rss - baseline) for name, count, rss in rows],
        )
    )
    growth = max(rss for _, _, rss in rows) - baseline
    measured = rows[-1][1] - rows[0][1]
    print(
        f"\nmax RSS growth after warm-up: {growth:.2f} MiB over {measured:,} requests "
        f"({'within' if growth <= 10 else 'OVER'} the 10 MB budget)"
    )


if __name__ == "__main__":
    main()

"""How long the tap's once-a-second sweep holds its event loop with many idle client connections.

    .venv/bin/python benchmarks/tap_sweep.py                         # this checkout, 10,000 idle
    PYTHONPATH=/tmp/compiled/src .venv/bin/python benchmarks/tap_sweep.py   # a compiled copy

Connections over a fake transport (no sockets), none expired: the figure is what every sweep costs
a tap holding that many keep-alive connections.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tap_chunk_cpu import FakeTransport
from tap_common import tap_settings


def main() -> None:
    from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.tap.proxy import ClientConnection, Tap  # noqa: PLC0415
    from specdec_exporter.tap.stats import RequestStats  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--sweeps", type=int, default=21)
    args = parser.parse_args()
    stats = RequestStats(TemperatureBuckets(), lambda _: 4)
    tap = Tap(tap_settings("http://vllm:8000", "127.0.0.1:0"), stats, lambda: frozenset({"bench"}))
    for _ in range(args.connections):
        ClientConnection(tap).connection_made(FakeTransport())  # type: ignore[arg-type]
    times = []
    for _ in range(args.sweeps):
        start = time.perf_counter()
        tap.sweep()
        times.append((time.perf_counter() - start) * 1e3)
    print(
        f"sweep with {len(tap.clients)} idle connections: "
        f"median {statistics.median(times):.2f} ms, "
        f"max {max(times):.2f} ms ({args.sweeps} sweeps)"
    )


if __name__ == "__main__":
    main()

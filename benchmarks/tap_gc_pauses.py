"""The cyclic garbage collector in the tap's process: what a full collection of the sidecar's
start-up heap costs with and without ``freeze_startup_heap``, and the collections (count, longest,
median, total) while the tap passes 64 paced streams.

    .venv/bin/python benchmarks/tap_gc_pauses.py        # ~20 s

The tap runs as in tap_latency_cpu.py (same upstream, load client and request shapes), in a child
process that records every collection through ``gc.callbacks`` and prints them when stopped.
"""

from __future__ import annotations

import gc
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tap_common import free_port, spawn, stop, wait_for_port

LATENCY = str(Path(__file__).resolve().parent / "tap_latency_cpu.py")


def full_collection_ms() -> dict[str, float]:
    """One full collection with the sidecar's modules and app loaded, before and after freezing."""
    from specdec_exporter.sidecar import serve  # noqa: PLC0415

    before = time.perf_counter()
    gc.collect()
    unfrozen = time.perf_counter() - before
    frozen_objects = serve.freeze_startup_heap()
    before = time.perf_counter()
    gc.collect()
    frozen = time.perf_counter() - before
    return {
        "frozen_objects": frozen_objects,
        "full_collection_ms": round(unfrozen * 1e3, 2),
        "full_collection_after_freeze_ms": round(frozen * 1e3, 3),
    }


def recorded_tap(port: int, upstream_port: int) -> None:
    """The benchmark's tap, recording each collection from SIGUSR1 on (start-up's own collections,
    freeze_startup_heap's among them, are not the tap's work); prints them on SIGTERM."""
    import tap_latency_cpu  # noqa: PLC0415

    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started = [0.0]

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses[info["generation"]].append((time.perf_counter() - started[0]) * 1e3)

    def report(_signal: int, _frame: FrameType | None) -> None:
        print(json.dumps({f"gen{gen}": summary(ms) for gen, ms in pauses.items()}), flush=True)
        raise SystemExit(0)

    def restart(_signal: int, _frame: FrameType | None) -> None:
        for recorded in pauses.values():
            recorded.clear()

    gc.callbacks.append(record)
    signal.signal(signal.SIGTERM, report)
    signal.signal(signal.SIGUSR1, restart)
    tap_latency_cpu.serve_tap(port, upstream_port)


def summary(pauses_ms: list[float]) -> dict[str, float]:
    if not pauses_ms:
        return {"count": 0}
    return {
        "count": len(pauses_ms),
        "longest_ms": round(max(pauses_ms), 3),
        "median_ms": round(statistics.median(pauses_ms), 3),
        "total_ms": round(sum(pauses_ms), 2),
    }


def main() -> None:
    if sys.argv[1:2] == ["tap"]:
        recorded_tap(int(sys.argv[2]), int(sys.argv[3]))
        return
    print(json.dumps(full_collection_ms()))
    upstream_port, tap_port = free_port(), free_port()
    upstream = spawn(LATENCY, "upstream", "--port", str(upstream_port))
    tap = subprocess.Popen(
        [sys.executable, __file__, "tap", str(tap_port), str(upstream_port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(upstream_port)
        wait_for_port(tap_port)
        tap.send_signal(signal.SIGUSR1)
        load = [sys.executable, LATENCY, "load", "--port", str(tap_port), "--concurrency", "64"]
        result = subprocess.run(load, check=True, capture_output=True, text=True).stdout
        print(json.dumps({"load": json.loads(result)}))
        tap.send_signal(signal.SIGTERM)
        out, _ = tap.communicate(timeout=10)
        print(out.strip())
    finally:
        stop(tap)  # type: ignore[arg-type]
        stop(upstream)


if __name__ == "__main__":
    main()

"""What one drain of the engine probe costs, in process, hot and with the caches evicted.

A micro-benchmark that explains BENCHMARKS.md's end-to-end figures (issue 30, session 12), not a
cost claimed for users. It imports the probe's plugin, so it runs with real vLLM's Python (the CI
stage's venv); with ``PROMETHEUS_MULTIPROC_DIR`` set, the rows write the multiprocess files as
with two API servers:

    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) \\
        ~/.cache/specdec-exporter/real-vllm/venv/bin/python benchmarks/probe_drain.py
    # the probe of another commit:
    git archive 33c0b92 src | tar -x -C /tmp/old
    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) ~/.cache/specdec-exporter/real-vllm/venv/bin/python \\
        benchmarks/probe_drain.py --src /tmp/old/src

Prints, per drain of 1, 13 and 120 steps and one finished sequence, the microseconds a drain
takes hot (back to back) and cold (48 MiB written between two drains, so its code and objects
come from memory, as between two steps of vLLM's work); then ``_count_steps`` alone, in
microseconds a step, for steps of one row (concurrency 1) and of several (concurrency 4).

With ``--parts``, instead, the parts of a drain, each hot and cold: a flush with nothing to
write, counting one finished sequence, one row's flush, ``os.getpid``; what
``benchmarks/probe_e2e.py``'s timer reads around a no-op (its thread-clock window as in session
12, and less the clock read just before it, as from session 13); and 15 values written into a
multiprocess-style file with ``prometheus_client``'s pack and a slice against a ``memoryview``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import sys
import tempfile
import time
import types
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the probe's sources")
    parser.add_argument("--drains", type=int, default=400)
    parser.add_argument("--parts", action="store_true", help="time a drain's parts instead")
    args = parser.parse_args()
    sys.path.insert(0, args.src)

    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from specdec_exporter.core.buckets import BatchBuckets, TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.probe import plugin  # noqa: PLC0415
    from specdec_exporter.probe.families import Families  # noqa: PLC0415

    families = Families(CollectorRegistry())
    state = plugin.ProbeState(
        families=families,
        model_name="m",
        temperature_buckets=TemperatureBuckets(),
        batch_buckets=BatchBuckets(),
        positions=4,
    )
    for label in TemperatureBuckets().labels:
        state.sequence_rows[label] = families.sequence_row("m", label, 4)
    plugin._precreate_batch(state, 0)
    metrics = types.SimpleNamespace(histogram=[1, 2, 1, 3, 4], num_draft_tokens=40)
    stats = types.SimpleNamespace(
        first_token_latency=0.05, first_token_ts=1.0, last_token_ts=1.5, num_generation_tokens=24
    )
    evict = bytearray(48 << 20)
    zeros = bytes(len(evict[::64]))
    if args.parts:
        parts(state, families, metrics, stats, evict=evict, zeros=zeros, n=args.drains)
        return
    for cold in (False, True):
        for steps in (1, 13, 120):
            total = 0
            for _ in range(args.drains):
                for _ in range(steps):
                    state.steps.append((0, 1, 1, 4, 2))
                state.finished.append((0.7, metrics, stats))
                if cold:
                    evict[::64] = zeros  # every cache line of 48 MiB
                start = time.perf_counter_ns()
                state.drain()
                total += time.perf_counter_ns() - start
            print(
                f"{'cold' if cold else 'hot '}: a drain of {steps:3d} steps and a sequence: "
                f"{total / args.drains / 1e3:6.1f} us"
            )
    for label, running in (
        ("one row (concurrency 1)", (1,) * 119 + (0,)),
        ("several (1-4)", (1, 2, 3, 4)),
    ):
        total = 0
        for _ in range(200):
            for index in range(480):
                state.steps.append((0, running[index % len(running)], 1, 4, 2))
            start = time.perf_counter_ns()
            state._count_steps(480)
            total += time.perf_counter_ns() - start
        print(f"_count_steps, {label}: {total / 200 / 480 / 1e3:.3f} us a step")


def parts(
    state: Any, families: Any, metrics: Any, stats: Any, *, evict: bytearray, zeros: bytes, n: int
) -> None:
    """Each part hot and cold, in microseconds a call (``--parts``)."""
    label = state.temperature_buckets.label_for(0.7)
    row = state.sequence_rows[label]

    def timed(name: str, act: Callable[[], object], prep: Callable[[], object] = int) -> None:
        figures = []
        for cold in (False, True):
            total = 0
            for _ in range(n):
                prep()
                if cold:
                    evict[::64] = zeros
                start = time.perf_counter_ns()
                act()
                total += time.perf_counter_ns() - start
            figures.append(total / n / 1e3)
        print(f"{name:58s} hot {figures[0]:6.1f} us, cold {figures[1]:6.1f} us")

    timed("a flush with nothing to write", families.flush)
    timed(
        "counting one finished sequence (no flush)",
        lambda: state._count_finished(*state.finished.popleft()),
        lambda: state.finished.append((0.7, metrics, stats)),
    )
    timed(
        "one row's flush (one sequence)",
        row.flush,
        lambda: state._count_finished(0.7, metrics, stats),
    )
    timed("os.getpid", os.getpid)
    families.flush()

    clock = time.thread_time_ns
    slot = [0, 0, 0]

    def noop(*args: object, **kwargs: object) -> None:
        return None

    def session12(*args: object, **kwargs: object) -> None:
        start = clock()
        try:
            noop(*args, **kwargs)
        finally:
            slot[0] += 1
            slot[1] += clock() - start

    def in_place(*args: object, **kwargs: object) -> None:
        before = clock()
        start = clock()
        try:
            noop(*args, **kwargs)
        finally:
            end = clock()
            slot[0] += 1
            slot[1] += end - start
            slot[2] += start - before

    for name, wrapper in (("session 12's window", session12), ("in place", in_place)):
        for cold in (False, True):
            slot[:] = [0, 0, 0]
            for _ in range(n):
                if cold:
                    evict[::64] = zeros
                wrapper(1, 2, mm_cache_stats=None, engine_idx=0)
            figure = (slot[1] - slot[2]) / slot[0] / 1e3
            print(
                f"the timer around a no-op, {name}, {'cold' if cold else 'hot '}: {figure:.2f} us"
            )

    with tempfile.TemporaryFile() as file:
        file.truncate(1 << 16)
        m = mmap.mmap(file.fileno(), 1 << 16)
        at = array("q", [8 + 256 * i for i in range(15)])
        totals = array("d", [0.0] * 15)
        amounts = [(i, 1.0) for i in range(15)]
        pack = struct.Struct("dd").pack

        def packed() -> None:
            for index, amount in amounts:
                total = totals[index] + amount
                totals[index] = total
                start = at[index]
                m[start : start + 16] = pack(total, 0.0)

        def through_memoryview() -> None:
            with memoryview(m) as raw:
                doubles = raw.cast("d")
                for index, amount in amounts:
                    i = at[index] >> 3
                    doubles[i] = doubles[i] + amount
                doubles.release()

        timed("15 values, prometheus_client's pack and a slice each", packed)
        timed("15 values through a memoryview", through_memoryview)
        m.close()


if __name__ == "__main__":
    main()

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
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the probe's sources")
    parser.add_argument("--drains", type=int, default=400)
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
    for cold in (False, True):
        for steps in (1, 13, 120):
            total = 0
            for _ in range(args.drains):
                for _ in range(steps):
                    state.steps.extend((0, 1, 1, 4, 2))
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
                state.steps.extend((0, running[index % len(running)], 1, 4, 2))
            start = time.perf_counter_ns()
            state._count_steps(480)
            total += time.perf_counter_ns() - start
        print(f"_count_steps, {label}: {total / 200 / 480 / 1e3:.3f} us a step")


if __name__ == "__main__":
    main()

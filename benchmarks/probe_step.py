"""What the engine probe's step hook costs a step, in process, hot and with the caches evicted.

A micro-benchmark that explains BENCHMARKS.md's end-to-end figures (issue 30, session 19), not a
cost claimed for users. vLLM calls the hook once per engine step, between two steps of its own
work, so in the served process its code and objects come from memory: "cold" here writes 48 MiB
between two calls, as ``probe_drain.py`` does. Each figure is the median over calls of the hook
less that of an empty hook with the same signature, called the same way (what vLLM pays for any
stat logger), both with the probe's own files (``SPECDEC_PROBE_DIR``, what the probe component
deploys). It imports the probe's plugin, so it runs with real vLLM's Python:

    ~/.cache/specdec-exporter/real-vllm/venv/bin/python benchmarks/probe_step.py
    # the probe of another commit:
    git archive e42cd27 src | tar -x -C /tmp/old
    ~/.cache/specdec-exporter/real-vllm/venv/bin/python benchmarks/probe_step.py --src /tmp/old/src
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def empty(
    scheduler_stats: Any,
    iteration_stats: Any,
    mm_cache_stats: Any = None,
    engine_idx: int = 0,
    *args: Any,
    **kwargs: Any,
) -> None:
    """A stat logger's ``record`` that does nothing: the floor every plugin pays."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the probe's sources")
    parser.add_argument("--calls", type=int, default=4000)
    args = parser.parse_args()
    sys.path.insert(0, args.src)
    os.environ["SPECDEC_PROBE_DIR"] = tempfile.mkdtemp(prefix="probe-step-")

    from types import SimpleNamespace  # noqa: PLC0415

    from vllm.v1.metrics.stats import SchedulerStats  # noqa: PLC0415
    from vllm.v1.spec_decode.metrics import SpecDecodingStats  # noqa: PLC0415

    from specdec_exporter.probe import plugin  # noqa: PLC0415

    config = SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=["m"]),
        speculative_config=SimpleNamespace(num_speculative_tokens=4),
        observability_config=SimpleNamespace(per_request_spec_decode_metrics="summary"),
    )
    logger = plugin.SpecdecProbeStatLogger(config, 0)
    state = logger.state
    assert state is not None and state.drain_every is not None, "the probe did not start"
    hooks = {"probe": logger.record, "empty": empty}
    evict = bytearray(48 << 20)
    zeros = bytes(len(evict[::64]))
    for cold in (False, True):
        times: dict[str, list[int]] = {name: [] for name in hooks}
        for _ in range(args.calls):
            for name in random.sample(sorted(hooks), len(hooks)):
                state.next_drain = time.monotonic() + 3600  # no drain inside the timing
                if len(state.steps) > 500:
                    state.steps.clear()
                if cold:
                    evict[::64] = zeros  # every cache line of 48 MiB
                spec = SpecDecodingStats.new(4)  # vLLM's fresh objects of a step
                spec.observe_draft(4, 2)
                stats = SchedulerStats(num_running_reqs=1, spec_decoding_stats=spec)
                start = time.perf_counter_ns()
                hooks[name](stats, None, mm_cache_stats=None, engine_idx=0)
                times[name].append(time.perf_counter_ns() - start)
        floor = statistics.median(times["empty"])
        print(
            f"{'cold' if cold else 'hot '}: the step hook {statistics.median(times['probe']):6.0f}"
            f" ns, an empty hook {floor:6.0f} ns: the probe's "
            f"{statistics.median(times['probe']) - floor:6.0f} ns a step"
        )


if __name__ == "__main__":
    main()

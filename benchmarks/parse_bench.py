"""Scrape-parse-derive CPU cost versus parsing the whole exposition with prometheus_client.

Run: .venv/bin/python benchmarks/parse_bench.py [--repeat N]
Both paths run in this process on the same text; the result is a ratio plus CPU ms per scrape.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import parse
from specdec_exporter.core.report import build_report
from specdec_exporter.core.timeline import Timeline
from variants import capture, with_engines


def ours(text: str) -> None:
    """What one poll does: parse, fold into the timeline, derive the report."""
    timeline: Timeline[tuple[str, str]] = Timeline(60)
    snapshot = parse(text)
    timeline.observe(0.0, snapshot.counters)
    timeline.observe(5.0, snapshot.counters)
    build_report(snapshot, timeline.window(), DraftCost(0.1, "default"))


def whole(text: str) -> None:
    for family in text_string_to_metric_families(text):
        for _ in family.samples:
            pass


def cpu_per_call(function: Callable[[str], None], text: str, repeat: int) -> float:
    function(text)  # warm up
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(repeat):
            function(text)
        best = min(best, (time.process_time() - started) / repeat)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; best of 5 runs x {args.repeat} calls; CPU time\n")
    print(
        f"{'exposition':<12} {'lines':>6} {'bytes':>8} {'whole parse ms':>15} "
        f"{'ours ms':>9} {'ratio':>7}"
    )
    for engines in (1, 16):
        text = capture("t3") if engines == 1 else with_engines(capture("t3"), engines)
        baseline = cpu_per_call(whole, text, max(1, args.repeat // engines))
        filtered = cpu_per_call(ours, text, args.repeat)
        print(
            f"{engines:>2} engine(s) {len(text.splitlines()):>6} {len(text):>8} "
            f"{baseline * 1000:>15.3f} {filtered * 1000:>9.3f} {baseline / filtered:>6.1f}x"
        )


if __name__ == "__main__":
    main()

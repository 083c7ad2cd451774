"""Coverage-guided fuzzing of the exposition parser and everything the poller derives from it.

Run: .venv/bin/python fuzz/fuzz_exposition.py NEW_CORPUS_DIR fuzz/corpus/exposition
     -max_total_time=60 (libFuzzer flags; see fuzz/README.md).
"""

from __future__ import annotations

import math
import sys

import atheris

with atheris.instrument_imports(include=["specdec_exporter", "prometheus_client"]):
    from specdec_exporter.core.model import DraftCost
    from specdec_exporter.core.parse import ExpositionError, Snapshot, parse
    from specdec_exporter.core.report import build_report
    from specdec_exporter.core.timeline import Timeline


def check(snapshot: Snapshot) -> None:
    """What every accepted snapshot promises: counts are finite, non-negative, consistent."""
    for counters in snapshot.counters.values():
        values = (
            counters.drafts,
            counters.draft_tokens,
            counters.accepted_tokens,
            *counters.accepted_per_position,
            counters.generation_tokens,
        )
        assert all(math.isfinite(value) and value >= 0 for value in values), counters
        assert counters.accepted_tokens <= counters.draft_tokens, counters
        assert all(value <= counters.drafts for value in counters.accepted_per_position), counters
    timeline: Timeline[tuple[str, str]] = Timeline(60)
    timeline.observe(0.0, snapshot.counters)
    timeline.observe(5.0, snapshot.counters)
    build_report(snapshot, timeline.window(), DraftCost(0.1, "default"))


def test_one_input(data: bytes) -> None:
    try:
        text = data.decode("utf-8")  # the scraper counts undecodable bodies as parse failures
    except UnicodeDecodeError:
        return
    try:
        snapshot = parse(text)
    except ExpositionError:
        return
    check(snapshot)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()

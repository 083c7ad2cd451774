"""docs/probe.md lists every family of the probe with its exact help text and the right count."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.buckets import MAX_EDGES, BatchBuckets, TemperatureBuckets
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.options import DEFAULT_MAX_BODY_BYTES
from specdec_exporter.probe.families import HELP, Families

DOC = Path(__file__).resolve().parents[2] / "docs" / "probe.md"


@pytest.mark.parametrize("name", sorted(HELP))
def test_each_family_is_in_the_docs_with_its_help(name: str) -> None:
    rows = [
        line
        for line in DOC.read_text().splitlines()
        if line.startswith(f"| `{name}`") or line.startswith(f"| `{name}_total`")
    ]
    assert len(rows) == 1, name
    assert f"| {HELP[name]} |" in rows[0]


def test_the_documented_series_count() -> None:
    registry = CollectorRegistry()
    families = Families(registry)
    for label in TemperatureBuckets().labels:
        families.temperature_series("m", label, 4)
    for label in BatchBuckets().labels:
        families.batch_series("m", "0", label)
    families.info.labels("v", "v", "on", "on", "").set(1)
    families.set_speculative_config(EngineSpeculativeConfig(True, "eagle3", "4"))
    lines = [
        line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")
    ]
    text = DOC.read_text()
    assert f"**{len(lines)} series**" in text
    assert not [line for line in lines if "_created" in line]  # a scrape renders no more
    assert "have no `_created` lines" in text


WORST_ENGINES = 16
WORST_MODEL = "m" * 200


def test_the_documented_worst_case_stays_far_below_the_sidecars_body_cap() -> None:
    """The most edges either variable takes, the most positions the probe accepts (k = 65), 16
    data-parallel engines and a 200-character model name: the series count docs/probe.md states,
    and a body under a quarter of the sidecar's cap (2,000 edges used to make it 25 MiB)."""
    temperature = TemperatureBuckets([round(0.1 * (i + 1), 1) for i in range(MAX_EDGES)])
    batch = BatchBuckets([2**i for i in range(MAX_EDGES)])
    registry = CollectorRegistry()
    families = Families(registry)
    for label in temperature.labels:
        families.temperature_series(WORST_MODEL, label, names.MAX_POSITIONS)
    for engine in range(WORST_ENGINES):
        for label in batch.labels:
            families.batch_series(WORST_MODEL, str(engine), label)
    families.info.labels("v", "v", "on", "on", "r" * names.REASON_LIMIT).set(1)
    longest = "x" * names.REASON_LIMIT
    families.set_speculative_config(EngineSpeculativeConfig(True, *[longest] * 6))
    body = generate_latest(registry)
    series = [
        line
        for line in body.decode().splitlines()
        if not line.startswith("#") and "_created" not in line
    ]
    text = DOC.read_text()
    assert f"**{len(series):,} series**" in text
    assert f"{MAX_EDGES} edges" in text and f"k = {names.MAX_POSITIONS}" in text
    megabytes = len(body) / 2**20
    assert f"{megabytes:.1f} MiB" in text
    assert len(body) < DEFAULT_MAX_BODY_BYTES / 4

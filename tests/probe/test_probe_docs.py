"""docs/probe.md lists every family of the probe with its exact help text and the right count."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specdec_exporter.core.buckets import BatchBuckets, TemperatureBuckets
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
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
    assert f"**{len([line for line in lines if '_created' not in line])} series**" in text
    assert f"({len(lines)} sample lines" in text

"""The README metrics table, the alerts' metric contract and the real exposition agree."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from test_poller_collector import poll_all

from probe_text import probe_text
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.tap.stats import RequestStats
from variants import FIXTURES, MODEL, capture, with_engines

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from specdec_artifacts.contract import SPECDEC_METRICS  # noqa: E402

pytestmark = pytest.mark.anyio
Family = tuple[str, str, frozenset[str]]


def families_of(text: str) -> set[Family]:
    found = set()
    for family in text_string_to_metric_families(text):
        if family.name.startswith("process_") or not family.samples:
            continue
        labels = frozenset(key for sample in family.samples for key in sample.labels) - {"le"}
        found.add((family.name, family.type, labels))
    return found


async def real_families() -> set[Family]:
    _, registry = await poll_all(
        [capture("t0"), with_engines(capture("t3"), 2) + probe_text()],
        tap_counts={(MODEL, "0"): Totals()},
        probe_files=True,  # --probe-dir: its read failures too
    )
    v0 = (FIXTURES / "vllm-0.7.3/v0_spec_ngram_k4.t3.prom").read_text()
    _, v0_registry = await poll_all([v0])
    tap_registry = CollectorRegistry(auto_describe=False)
    stats = RequestStats(TemperatureBuckets((0.5, 0.7, 1.0)), lambda model: 4)
    stats.register(tap_registry)
    stats.add_model(MODEL)
    texts = [generate_latest(r).decode() for r in (registry, v0_registry, tap_registry)]
    return set().union(*(families_of(text) for text in texts))


def readme_families() -> set[Family]:
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(specdec_\w+)` \| (\w+) \| ([^|]*) \|", readme, re.MULTILINE)
    found = set()
    for name, kind, labels in rows:
        label_set = frozenset(re.findall(r"`(\w+)`", labels))
        family = name.removesuffix("_total") if kind == "counter" else name
        found.add((family, kind, label_set))
    return found


async def test_readme_table_lists_exactly_the_exported_families() -> None:
    real, documented = await real_families(), readme_families()
    assert documented == real, (
        f"missing from README: {sorted(real - documented)}\n"
        f"in README but not exported: {sorted(documented - real)}"
    )


async def test_the_alerts_contract_matches_the_exposition() -> None:
    real = await real_families()
    contract = {(m.name, m.type, m.labels) for m in SPECDEC_METRICS}
    assert contract <= real, sorted(contract - real)

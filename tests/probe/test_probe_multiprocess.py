"""With --api-server-count 2 vLLM serves /metrics from PROMETHEUS_MULTIPROC_DIR: two API-server
processes with the probe give one info series (not one per pid) and summed counters."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

SCRIPT = textwrap.dedent(
    """
    from specdec_exporter.probe.families import Families
    families = Families()
    families.info.labels("0.1.0", "0.32.0", "on", "on", "").set(1)
    families.temperature_series("m", "0", 4).drafts.inc(3)
    families.batch_series("m", "0", "1").steps.inc()
    """
)


def test_two_api_servers_give_one_info_series_and_summed_counters(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, timeout=60)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    info = [
        sample
        for metric in registry.collect()
        if metric.name == "specdec_probe_info"
        for sample in metric.samples
    ]
    assert [(sample.labels, sample.value) for sample in info] == [
        (
            {
                "version": "0.1.0",
                "vllm_version": "0.32.0",
                "temperature_split": "on",
                "batch_split": "on",
                "reason": "",
            },
            1.0,
        )
    ]
    labels = {"model_name": "m", "temperature_bucket": "0"}
    assert registry.get_sample_value("specdec_probe_drafts_total", labels) == 6
    batch = {"model_name": "m", "engine": "0", "batch_bucket": "1"}
    assert registry.get_sample_value("specdec_probe_batch_steps_total", batch) == 2
    assert registry.get_sample_value("specdec_probe_errors_total", {"hook": "record"}) == 0

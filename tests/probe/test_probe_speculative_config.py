"""The probe exports vLLM's own speculative configuration, read from the ``vllm_config`` its stat
logger receives: every field vLLM has, empty for one it lacks, "off" without speculation, one
series with two API servers; its start-up line says its state and the config it read."""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fake_vllm_modules as fake
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig

EAGLE3 = SimpleNamespace(
    method="eagle3",
    num_speculative_tokens=4,
    model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    draft_tensor_parallel_size=1,
    num_speculative_tokens_per_batch_size=[(1, 4, 4), (5, 64, 2)],
)


def vllm_config(speculative: Any, per_request: str = "summary") -> Any:
    return SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=["tiny"]),
        speculative_config=speculative,
        observability_config=SimpleNamespace(per_request_spec_decode_metrics=per_request),
    )


class Plugin:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.module: Any = importlib.import_module("specdec_exporter.probe.plugin")
        self.module.REGISTRY = registry
        self.registry = registry

    def start(self, config: Any) -> Any:
        return self.module.SpecdecProbeStatLogger(config, 0)

    def series(self) -> list[dict[str, str]]:
        return [
            dict(sample.labels)
            for metric in self.registry.collect()
            if metric.name == names.SPECULATIVE_CONFIG_INFO
            for sample in metric.samples
            if sample.value == 1
        ]


@pytest.fixture
def plugin() -> Iterator[Plugin]:
    with fake.installed():
        yield Plugin(CollectorRegistry())


def test_every_field_vllm_has_is_exported(plugin: Plugin) -> None:
    plugin.start(vllm_config(EAGLE3))
    assert plugin.series() == [
        {
            "speculative": "on",
            "method": "eagle3",
            "num_speculative_tokens": "4",
            "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "draft_tensor_parallel_size": "1",
            "num_speculative_tokens_per_batch_size": "[[1,4,4],[5,64,2]]",
            "per_request_metrics": "summary",
        }
    ]
    read = parse_probe(generate_latest(plugin.registry).decode()).speculative_config
    assert read is not None and read.method == "eagle3" and read.k == 4


def test_a_field_an_older_vllm_lacks_is_empty_and_the_probe_stays_on(plugin: Plugin) -> None:
    old = SimpleNamespace(num_speculative_tokens=4)  # no method, model, TP or schedule
    assert plugin.start(vllm_config(old)).state is not None
    assert plugin.series() == [
        dict.fromkeys(names.SPECULATIVE_CONFIG_LABELS, "")
        | {"speculative": "on", "num_speculative_tokens": "4", "per_request_metrics": "summary"}
    ]


def test_without_speculation_the_series_says_off(plugin: Plugin) -> None:
    plugin.start(vllm_config(None, per_request="none"))
    assert plugin.series() == [
        dict.fromkeys(names.SPECULATIVE_CONFIG_LABELS, "")
        | {"speculative": "off", "per_request_metrics": "none"}
    ]


def test_the_start_up_line_says_the_version_both_splits_and_the_config(
    plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="vllm.specdec_probe"):
        plugin.start(vllm_config(EAGLE3, per_request="none"))
    [line] = [record.getMessage() for record in caplog.records]
    version = importlib.import_module("specdec_exporter").__version__
    assert line == (
        f"specdec probe {version} in vLLM {fake.VERSION}: temperature split off: vLLM runs "
        "without --per-request-spec-decode-metrics summary, batch split on (buckets "
        "1,2-4,5-8,9-16,17-32,33-64,65+); series on vLLM's /metrics; vLLM's speculative "
        "config: method eagle3, k 4, draft "
        "model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, draft TP 1, k per batch size "
        "[[1,4,4],[5,64,2]], per-request metrics none"
    )
    assert caplog.records[0].levelno == logging.WARNING


SCRIPT = textwrap.dedent(
    """
    from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
    from specdec_exporter.probe.families import Families
    Families().set_speculative_config(EngineSpeculativeConfig(True, "eagle3", "4"))
    """
)


def test_two_api_servers_give_one_series(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, timeout=60)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    text = generate_latest(registry).decode()
    assert text.count(f"{names.SPECULATIVE_CONFIG_INFO}{{") == 1
    assert parse_probe(text).speculative_config == EngineSpeculativeConfig(True, "eagle3", "4")

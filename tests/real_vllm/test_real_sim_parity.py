"""The simulator against real vLLM, given the same command-line options: same `vllm:` family table,
same response and stream shapes, same answers to every edge case. Any difference fails with a
readable diff.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from real_vllm import edge_cases
from real_vllm.server_script import load_server_module
from real_vllm.shapes import (
    Family,
    Shape,
    family_table,
    json_shape,
    readable_diff,
    render_family_table,
    stream_shape,
)
from real_vllm.traffic import MODEL, stream_raw
from specdec_exporter.commands import simulate as sim_cli
from specdec_exporter.devtools.sim.server import RunningSimulator, running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig

pytestmark = pytest.mark.real_vllm

server = load_server_module()
CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32.0-cpu"
REAL_ONLY_FLAGS = ["--dtype", "float32"]
"""`vllm serve` flags the simulator has no use for."""
VERSION_DEPENDENT_LABELS = {"vllm:cache_config_info": {"simple_cpu_offload_num_blocks"}}
"""Config fields vLLM 0.33 (what the simulator copies) exports and the real 0.32 CPU build lacks."""

CHAT = "/v1/chat/completions"
USAGE = {"stream_options": {"include_usage": True}}


def chat(**fields: Any) -> tuple[str, dict[str, Any]]:
    body = {
        "model": MODEL,
        "max_tokens": 12,
        "temperature": 0.8,
        "messages": [{"role": "user", "content": "class Foo:"}],
        **fields,
    }
    return CHAT, body


def captured_requests() -> dict[str, tuple[str, dict[str, Any]]]:
    requests = {}
    for path in sorted((CAPTURES / "responses").glob("*.json")):
        request = json.loads(path.read_text())["request"]
        requests[path.stem] = (request["path"], request["body"])
    for path in sorted((CAPTURES / "streams").glob("*.request.json")):
        request = json.loads(path.read_text())
        requests[path.name.removesuffix(".request.json")] = (request["path"], request["body"])
    return requests


REQUESTS = {
    **captured_requests(),
    "chat_n2_stream_include_usage": chat(n=2, stream=True, **USAGE),
    "chat_n2_stream_no_include_usage": chat(n=2, stream=True),
    "chat_stream_continuous_usage": chat(
        stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}
    ),
    "completions_nonstream": (
        "/v1/completions",
        {"model": MODEL, "max_tokens": 12, "temperature": 0.8, "prompt": "class Foo:"},
    ),
    "completions_stream_include_usage": (
        "/v1/completions",
        {
            "model": MODEL,
            "max_tokens": 12,
            "temperature": 0.8,
            "prompt": "class Foo:",
            "stream": True,
            **USAGE,
        },
    ),
    "completions_stream_prompt_list_include_usage": (
        "/v1/completions",
        {
            "model": MODEL,
            "max_tokens": 12,
            "temperature": 0.8,
            "prompt": ["class Foo:", "def bar"],
            "stream": True,
            **USAGE,
        },
    ),
}


def sim_config_for(command: list[str], layout: Any) -> SimConfig:
    """Parse the real server's `vllm serve` flags with the simulator's own parser."""
    parser = argparse.ArgumentParser()
    sim_cli.configure(parser)
    flags = command[command.index("serve") + 2 :]  # after `serve MODEL_PATH`
    generation = ["--generation-config", str(layout.models / "target")]  # vLLM's "auto" default
    args, unknown = parser.parse_known_args([*flags, *generation])
    assert unknown == REAL_ONLY_FLAGS, f"flags the simulator does not know: {unknown}"
    return sim_cli.build_config(args).with_port(0)


def simulator_for(layout: Any, spec: bool) -> Iterator[RunningSimulator]:
    with running_simulator(
        sim_config_for(server.server_command(layout, 0, spec, []), layout)
    ) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def simulator(real_vllm_layout: Any) -> Iterator[RunningSimulator]:
    yield from simulator_for(real_vllm_layout, spec=True)


@pytest.fixture(scope="module")
def simulator_nospec(real_vllm_layout: Any) -> Iterator[RunningSimulator]:
    yield from simulator_for(real_vllm_layout, spec=False)


def comparable(table: dict[str, Family]) -> list[str]:
    kept = {
        name: replace(
            family,
            labels=tuple(
                label
                for label in family.labels
                if label not in VERSION_DEPENDENT_LABELS.get(name, ())
            ),
        )
        for name, family in table.items()
    }
    return render_family_table(kept)


def assert_same_families(real_url: str, sim_url: str) -> None:
    real = family_table(httpx.get(f"{real_url}/metrics", trust_env=False).text)
    simulated = family_table(httpx.get(f"{sim_url}/metrics", trust_env=False).text)
    diff = readable_diff(comparable(real), comparable(simulated), "real vLLM", "simulator")
    assert not diff, "vllm: family tables differ:\n" + diff


def test_family_table_with_speculation(real_vllm: Any, simulator: RunningSimulator) -> None:
    assert_same_families(real_vllm.url, simulator.url)


def test_family_table_without_speculation(
    real_vllm_nospec: Any, simulator_nospec: RunningSimulator
) -> None:
    assert_same_families(real_vllm_nospec.url, simulator_nospec.url)


def shape_of(base_url: str, path: str, body: dict[str, Any]) -> Shape:
    with httpx.Client(base_url=base_url, timeout=120, trust_env=False) as client:
        if body.get("stream"):
            return stream_shape(stream_raw(client, body, path))
        response = client.post(path, json=body)
        response.raise_for_status()
        return json_shape(response.json())


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_same_shape(real_vllm: Any, simulator: RunningSimulator, name: str) -> None:
    path, body = REQUESTS[name]
    real, simulated = shape_of(real_vllm.url, path, body), shape_of(simulator.url, path, body)
    diff = readable_diff(real, simulated, f"real vLLM {name}", f"simulator {name}")
    assert not diff, f"{name}: shapes differ:\n{diff}"


# The edge-case matrix (tests/real_vllm/edge_cases.py): the same requests to both servers.


@pytest.fixture(scope="module")
def answers(real_vllm: Any, simulator: RunningSimulator) -> dict[str, tuple[Any, Any]]:
    """Every edge case sent once to each server (about 5 s against the tiny real model)."""
    found = {}
    with (
        httpx.Client(base_url=real_vllm.url, timeout=120, trust_env=False) as real,
        httpx.Client(base_url=simulator.url, timeout=120, trust_env=False) as ours,
    ):
        for name, case in edge_cases.CASES.items():
            found[name] = (edge_cases.record(real, case), edge_cases.record(ours, case))
    return found


@pytest.mark.parametrize("name", sorted(edge_cases.CASES))
def test_edge_case_answered_alike(answers: dict[str, tuple[Any, Any]], name: str) -> None:
    """Status, error type and param, usage chunks, spec metrics, choices, finish_reason."""
    real, simulated = answers[name]
    assert edge_cases.essentials(simulated) == edge_cases.essentials(real)
    if "error" in real.get("body", {}):
        assert simulated["body"] == real["body"]


@pytest.mark.parametrize("name", sorted(edge_cases.CASES))
def test_edge_case_shapes_alike(answers: dict[str, tuple[Any, Any]], name: str) -> None:
    real, simulated = answers[name]
    assert sorted(simulated["headers"]) == sorted(real["headers"])
    diff = readable_diff(
        edge_cases.shape_of(real),
        edge_cases.shape_of(simulated),
        f"real vLLM {name}",
        f"simulator {name}",
    )
    assert not diff, f"{name}: shapes differ:\n{diff}"


@pytest.mark.parametrize(
    "name",
    sorted(
        name
        for name in edge_cases.CASES
        if name.startswith("completions_") and name.endswith("_continuous")
    ),
)
def test_running_usage_counts_each_choices_own_prompt(
    answers: dict[str, tuple[Any, Any]], name: str
) -> None:
    """A list of prompts with `continuous_usage_stats`: each chunk's `prompt_tokens` is its own
    prompt's (vLLM's `num_prompt_tokens[prompt_idx]`), not the request's total."""
    real, simulated = answers[name]
    assert edge_cases.running_prompt_tokens(simulated) == edge_cases.running_prompt_tokens(real)


@pytest.mark.parametrize(
    "name", sorted(name for name in edge_cases.CASES if "two_prompts_stream" in name)
)
def test_a_prompt_list_streams_side_by_side(answers: dict[str, tuple[Any, Any]], name: str) -> None:
    """Real vLLM runs a list's prompts side by side (every prompt sends content before the first
    finish); the simulator must too, not stream one prompt's content and finish, then the next."""
    real, simulated = answers[name]
    assert edge_cases.interleaved(edge_cases.stream_order(real)), edge_cases.stream_order(real)
    assert edge_cases.interleaved(edge_cases.stream_order(simulated)), edge_cases.stream_order(
        simulated
    )

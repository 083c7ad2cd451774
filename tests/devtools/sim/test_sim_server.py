"""The running simulator end to end: reconciliation, restarts, faults, errors, determinism."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sim_support import NGRAM_K4, sample_value, sse_payloads, structure

from specdec_exporter.devtools.sim.server import RunningSimulator, running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config

FAST = {"speed": 50.0, "speculative": parse_speculative_config(NGRAM_K4)}
SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
DEADLINE = 10.0


def config(**overrides: Any) -> SimConfig:
    return SimConfig(**{**FAST, **overrides})


def chat(content: str = "hello", **fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 32, **fields}


def wait_until(condition: Any, what: str) -> None:
    """Poll a condition until it holds, failing after DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def counters(text: str) -> dict[str, float]:
    values = {key: sample_value(text, name) for key, name in SPEC_COUNTERS.items()}
    values["generation_tokens"] = sample_value(text, "vllm:generation_tokens_total")
    values["requests"] = sample_value(text, "vllm:request_success_total")
    return values


# reconciliation ---------------------------------------------------------------------------

RECON = config(
    per_request_spec_decode_metrics="detailed", data_parallel_size=2, api_server_count=1, seed=11
)


async def one_request(client: httpx.AsyncClient, index: int) -> dict[str, Any] | None:
    """Eight kinds of request; returns the per-request spec metrics the client received."""
    kind = index % 8
    temperature = [0.0, 0.7, 1.0, 0.3, None, 1.0, 0.7, 0.3][kind]
    fields: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
    if kind in (2, 3):
        path, body = "/v1/completions", {"prompt": f"prompt {index}", "max_tokens": 40, **fields}
    else:
        path, body = "/v1/chat/completions", chat(f"question {index}", **fields)
    if kind == 6:
        body["n"] = 2
    if kind in (1, 3, 5, 7):
        body["stream"] = True
        if kind != 7:
            body["stream_options"] = {"include_usage": True}
        async with client.stream("POST", path, json=body) as response:
            assert response.status_code == 200
            payloads = sse_payloads(b"".join([part async for part in response.aiter_bytes()]))
        assert payloads[-1] == "[DONE]"
        last = httpx.Response(200, content=payloads[-2]).json()
        return last.get("metrics", {}).get("speculative_decoding")
    response = await client.post(path, json=body)
    assert response.status_code == 200
    metrics = response.json()["metrics"]
    return None if metrics is None else metrics["speculative_decoding"]


@pytest.fixture(scope="module")
def recon_sim() -> Iterator[RunningSimulator]:
    with running_simulator(RECON) as sim:
        yield sim


@pytest.mark.anyio
async def test_per_request_metrics_reconcile_with_counters_under_concurrency(
    recon_sim: RunningSimulator,
) -> None:
    async with httpx.AsyncClient(base_url=recon_sim.url, timeout=60.0) as client:
        before = counters((await client.get("/metrics")).text)
        returned = await asyncio.gather(*(one_request(client, i) for i in range(32)))
        after_text = (await client.get("/metrics")).text
    after = counters(after_text)
    delta = {key: after[key] - before[key] for key in after}
    truth = recon_sim.ground_truth()
    specs = [spec for spec in returned if spec is not None]
    assert len(specs) == 24  # n=2 and streams without include_usage carry none
    summed = {
        "drafts": sum(s["num_spec_steps"] for s in specs),
        "draft_tokens": sum(s["num_draft_tokens"] for s in specs),
        "accepted_tokens": sum(s["num_accepted_draft_tokens"] for s in specs),
    }
    attributed = truth["per_request_metrics"]["attributed"]
    unattributed = truth["per_request_metrics"]["unattributed"]
    assert {k: attributed[k] for k in summed} == summed
    assert attributed["requests"] == 24 and unattributed["requests"] == 12
    for key in SPEC_COUNTERS:
        assert delta[key] == attributed[key] + unattributed[key] == truth["total"][key] > 0
    assert delta["generation_tokens"] == truth["total"]["generation_tokens"]
    assert delta["requests"] == truth["total"]["requests"] == 36
    for key in ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens"):
        assert sum(t[key] for t in truth["by_temperature"].values()) == truth["total"][key]
    assert set(truth["by_temperature"]) == {"0.0", "0.3", "0.7", "1.0"}
    for engine in ("0", "1"):
        assert (
            sample_value(after_text, SPEC_COUNTERS["drafts"], engine=engine)
            == truth["engines"][engine]["drafts"]
            > 0
        )
    per_position = [
        sample_value(
            after_text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)
        )
        for p in range(4)
    ]
    assert per_position == truth["total"]["accepted_per_position"]
    for spec in specs:
        assert len(spec["per_step_accepted"]) == spec["num_spec_steps"]
        assert sum(spec["per_step_accepted"]) == spec["num_accepted_draft_tokens"]
        assert sum(spec["per_step_drafted"]) == spec["num_draft_tokens"]


def test_counters_include_a_request_as_soon_as_its_last_byte_arrived() -> None:
    with (
        running_simulator(config(per_request_spec_decode_metrics="summary")) as sim,
        httpx.Client(base_url=sim.url, timeout=30.0) as client,
    ):
        for temperature in (0.0, 0.5, 1.0):
            before = counters(client.get("/metrics").text)
            with client.stream(
                "POST",
                "/v1/chat/completions",
                json=chat(
                    temperature=temperature, stream=True, stream_options={"include_usage": True}
                ),
            ) as response:
                payloads = sse_payloads(b"".join(response.iter_bytes()))
            after = counters(client.get("/metrics").text)
            spec = httpx.Response(200, content=payloads[-2]).json()["metrics"][
                "speculative_decoding"
            ]
            assert after["drafts"] - before["drafts"] == spec["num_spec_steps"]
            assert (
                after["accepted_tokens"] - before["accepted_tokens"]
                == spec["num_accepted_draft_tokens"]
            )
            assert after["requests"] - before["requests"] == 1


# determinism --------------------------------------------------------------------------------


def run_sequence(**overrides: Any) -> tuple[list[Any], dict[str, Any]]:
    bodies = [
        chat("a", temperature=0.0),
        chat("b", temperature=0.9, max_tokens=48),
        {"prompt": "c", "max_tokens": 20, "temperature": 0.4},
    ]
    with (
        running_simulator(config(per_request_spec_decode_metrics="summary", **overrides)) as sim,
        httpx.Client(base_url=sim.url, timeout=30.0) as client,
    ):
        outputs = []
        for body in bodies:
            path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
            answer = client.post(path, json=body).json()
            outputs.append((answer["id"], answer["choices"], answer["usage"], answer["metrics"]))
        truth = sim.ground_truth()
    del truth["since"]
    return outputs, truth


def test_same_seed_and_sequence_give_the_same_outputs_and_counts() -> None:
    first, second = run_sequence(seed=5), run_sequence(seed=5)
    assert first == second
    assert run_sequence(seed=6)[0] != first[0]


def test_drafter_quality_changes_acceptance_but_never_the_text() -> None:
    good, _ = run_sequence(seed=5, drafter_quality=0.95)
    bad, _ = run_sequence(seed=5, drafter_quality=0.1)
    assert [o[1] for o in good] == [o[1] for o in bad]
    rate = [
        sum(o[3]["speculative_decoding"]["num_accepted_draft_tokens"] for o in run)
        for run in (good, bad)
    ]
    assert rate[0] > rate[1]


# restart, drafter, schedule, variants ------------------------------------------------------


def test_restart_resets_every_counter_and_renews_created() -> None:
    with running_simulator(config()) as sim, httpx.Client(base_url=sim.url) as client:
        client.post("/v1/chat/completions", json=chat())
        before = client.get("/metrics").text
        assert counters(before)["generation_tokens"] > 0
        answer = client.post("/sim/restart").json()
        after = client.get("/metrics").text
        truth = client.get("/sim/ground-truth").json()
    assert answer["restarts"] == 1 == truth["restarts"]
    assert all(value == 0 for value in counters(after).values())
    assert truth["total"]["drafts"] == truth["total"]["generation_tokens"] == 0
    created = "vllm:spec_decode_num_drafts_created"
    assert sample_value(after, created) > sample_value(before, created)
    assert sample_value(after, "process_start_time_seconds") > sample_value(
        before, "process_start_time_seconds"
    )


def test_restart_cuts_streams_in_flight() -> None:
    with (
        running_simulator(config(speed=1.0)) as sim,
        httpx.Client(base_url=sim.url, timeout=30.0) as client,
        client.stream(
            "POST", "/v1/chat/completions", json=chat(max_tokens=4000, ignore_eos=True, stream=True)
        ) as response,
    ):
        parts = response.iter_bytes()
        next(parts)
        httpx.post(f"{sim.url}/sim/restart")
        rest = b"".join(parts)
    assert b"[DONE]" not in rest


def test_drafter_quality_can_be_degraded_at_run_time() -> None:
    with running_simulator(config()) as sim, httpx.Client(base_url=sim.url) as client:
        assert client.get("/sim/drafter").json()["quality"] == 0.85
        for _ in range(6):
            client.post("/v1/chat/completions", json=chat(temperature=0.0))
        good = client.get("/sim/ground-truth").json()["total"]
        assert client.post("/sim/drafter", json={"quality": 0.1}).json()["quality"] == 0.1
        client.post("/sim/restart")
        for _ in range(6):
            client.post("/v1/chat/completions", json=chat(temperature=0.0))
        bad = client.get("/sim/ground-truth").json()["total"]
        assert client.post("/sim/drafter", json={"quality": 2}).status_code == 400
        assert client.post("/sim/drafter", json={}).status_code == 400
    assert good["accepted_tokens"] / good["draft_tokens"] > 0.6
    assert bad["accepted_tokens"] / bad["draft_tokens"] < 0.2


def test_k_zero_for_every_batch_size_moves_no_spec_counter() -> None:
    spec = parse_speculative_config(
        '{"method": "eagle3", "num_speculative_tokens": 3, '
        '"num_speculative_tokens_per_batch_size": [[1, 512, 0]]}'
    )
    with (
        running_simulator(
            config(speculative=spec, per_request_spec_decode_metrics="summary")
        ) as sim,
        httpx.Client(base_url=sim.url) as client,
    ):
        answer = client.post("/v1/chat/completions", json=chat()).json()
        text = client.get("/metrics").text
    values = counters(text)
    assert values["generation_tokens"] == 32
    assert values["drafts"] == values["draft_tokens"] == values["accepted_tokens"] == 0
    spec_metrics = answer["metrics"]["speculative_decoding"]
    assert spec_metrics["num_spec_steps"] == 0
    assert spec_metrics["mean_acceptance_length"] == 1.0
    assert spec_metrics["draft_acceptance_rate"] == 0.0
    assert spec_metrics["acceptance_histogram"] == [0, 0, 0, 0]


def test_without_speculation_no_spec_metrics_anywhere() -> None:
    with (
        running_simulator(
            config(speculative=None, per_request_spec_decode_metrics="summary")
        ) as sim,
        httpx.Client(base_url=sim.url) as client,
    ):
        answer = client.post("/v1/chat/completions", json=chat()).json()
        text = client.get("/metrics").text
    assert answer["metrics"] is None
    assert "spec_decode" not in text
    assert sample_value(text, "vllm:generation_tokens_total") == 32


def test_option_none_returns_no_per_request_metrics() -> None:
    with running_simulator(config()) as sim, httpx.Client(base_url=sim.url) as client:
        answer = client.post("/v1/chat/completions", json=chat()).json()
        truth = client.get("/sim/ground-truth").json()
    assert answer["metrics"] is None
    assert truth["per_request_metrics"]["unattributed"]["requests"] == 1


def test_force_include_usage_adds_the_usage_chunk() -> None:
    with (
        running_simulator(
            config(enable_force_include_usage=True, per_request_spec_decode_metrics="summary")
        ) as sim,
        httpx.Client(base_url=sim.url) as client,
        client.stream("POST", "/v1/chat/completions", json=chat(stream=True)) as response,
    ):
        payloads = sse_payloads(b"".join(response.iter_bytes()))
    usage = httpx.Response(200, content=payloads[-2]).json()
    assert usage["choices"] == [] and "speculative_decoding" in usage["metrics"]
    # vLLM's should_include_usage: forcing also turns the running usage on, on every chunk
    chunks = [httpx.Response(200, content=p).json() for p in payloads[:-2]]
    assert chunks and all(chunk["usage"]["prompt_tokens"] > 0 for chunk in chunks)


def test_client_disconnect_aborts_the_request() -> None:
    with running_simulator(config(speed=1.0)) as sim:
        with (
            httpx.Client(base_url=sim.url, timeout=30.0) as client,
            client.stream(
                "POST",
                "/v1/chat/completions",
                json=chat(max_tokens=4000, ignore_eos=True, stream=True),
            ) as response,
        ):
            next(response.iter_bytes())

        def aborted() -> bool:
            reasons = sim.ground_truth()["total"]["finished_reasons"]
            return reasons.get("abort", 0) == 1

        wait_until(aborted, "the abort to be recorded")
        text = httpx.get(f"{sim.url}/metrics").text
    assert sample_value(text, "vllm:request_success_total", finished_reason="abort") == 1


# faults --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_sim() -> Iterator[RunningSimulator]:
    with running_simulator(config()) as sim:
        yield sim


@pytest.fixture
def faulty(fault_sim: RunningSimulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fault_sim.url, timeout=5.0) as client:
        yield client
        client.post("/sim/fault", json={"kind": "none"})


def set_fault(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/sim/fault", json=body)
    assert response.status_code == 200
    return dict(response.json())


def test_fault_500(faulty: httpx.Client) -> None:
    set_fault(faulty, kind="500", seconds=30)
    assert faulty.get("/metrics").status_code == 500
    assert faulty.get("/sim/fault").json()["kind"] == "500"
    set_fault(faulty, kind="none")
    assert faulty.get("/metrics").status_code == 200


def test_fault_garbage_and_html(faulty: httpx.Client) -> None:
    set_fault(faulty, kind="garbage", seconds=30)
    response = faulty.get("/metrics")
    assert response.status_code == 200 and b"# HELP vllm:" not in response.content
    set_fault(faulty, kind="html", seconds=30)
    response = faulty.get("/metrics")
    assert response.headers["content-type"].startswith("text/html")
    assert response.text.startswith("<!DOCTYPE html>")


def test_fault_truncated_cuts_the_body_mid_line(faulty: httpx.Client) -> None:
    full = faulty.get("/metrics").text
    set_fault(faulty, kind="truncated", seconds=30)
    cut = faulty.get("/metrics").text
    assert 0 < len(cut) < len(full) / 2
    assert not cut.endswith("\n")
    whole_lines = cut.rsplit("\n", 1)[0]
    assert structure(whole_lines) == structure(full)[: len(structure(whole_lines))]


def test_fault_slow_delays_metrics(faulty: httpx.Client) -> None:
    set_fault(faulty, kind="slow", seconds=30, delay=0.5)
    with pytest.raises(httpx.ReadTimeout):
        faulty.get("/metrics", timeout=0.1)
    assert faulty.get("/metrics", timeout=5.0).status_code == 200
    assert faulty.get("/v1/models").status_code == 200


def test_fault_expires_after_its_seconds(faulty: httpx.Client) -> None:
    set_fault(faulty, kind="500", seconds=0.2)
    wait_until(lambda: faulty.get("/metrics").status_code == 200, "the fault to expire")
    assert faulty.get("/sim/fault").json()["kind"] == "none"


def refused(url: str) -> bool:
    try:
        httpx.get(url, timeout=1.0)
    except httpx.ConnectError:
        return True
    return False


def serving(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def test_fault_refuse_closes_the_port_for_a_while(fault_sim: RunningSimulator) -> None:
    url = f"{fault_sim.url}/metrics"
    assert (
        httpx.post(
            f"{fault_sim.url}/sim/fault", json={"kind": "refuse", "seconds": 0.5}
        ).status_code
        == 200
    )
    wait_until(lambda: refused(url), "connections to be refused")
    wait_until(lambda: serving(url), "the port to accept again")


def test_restart_with_downtime_refuses_then_serves_fresh_counters() -> None:
    with running_simulator(config()) as sim:
        httpx.post(f"{sim.url}/v1/chat/completions", json=chat())
        assert httpx.post(f"{sim.url}/sim/restart", json={"downtime": 0.5}).status_code == 200
        url = f"{sim.url}/metrics"
        wait_until(lambda: refused(url), "connections to be refused")
        wait_until(lambda: serving(url), "the port to accept again")
        assert counters(httpx.get(url).text)["generation_tokens"] == 0


@pytest.mark.parametrize(
    "body",
    [{"kind": "meltdown"}, {"kind": "slow", "seconds": -1}, [], {"kind": "500", "seconds": "ten"}],
)
def test_bad_fault_requests_are_rejected(faulty: httpx.Client, body: Any) -> None:
    assert faulty.post("/sim/fault", json=body).status_code == 400


# errors --------------------------------------------------------------------------------------

MODEL = SimConfig().served_model_name
HI = '"messages": [{"role": "user", "content": "hi"}]'
ERRORS = [  # the full matrix against vLLM's own answers is test_sim_edge_cases.py
    (b"{not json", 400, "Bad Request", "body.1", "JSON decode error"),
    (
        b'{"messages": [], "temperature": "hot"}',
        400,
        "Bad Request",
        "body.temperature",
        "valid number",
    ),
    (b'{"temperature": 0.5}', 400, "Bad Request", "body.messages", "Field required"),
    (
        b'{%s, "temperature": -0.5}' % HI.encode(),
        400,
        "BadRequestError",
        "temperature",
        "temperature must be non-negative, got -0.5.",
    ),
    (
        b'{%s, "temperature": 2.5}' % HI.encode(),
        400,
        "BadRequestError",
        "temperature",
        "temperature must be in [0, 2]",
    ),
    (
        b'{"messages": [], "model": "gpt-9"}',
        404,
        "NotFoundError",
        "model",
        "The model `gpt-9` does not exist. Valid aliases: " + MODEL + ".",
    ),
    (
        b'{%s, "temperature": 0, "n": 2}' % HI.encode(),
        400,
        "BadRequestError",
        None,
        "n must be 1 when using greedy sampling, got 2.",
    ),
    (
        b'{%s, "max_tokens": 0}' % HI.encode(),
        400,
        "BadRequestError",
        "max_tokens",
        "max_tokens must be at least 1",
    ),
    (
        b'{"messages": [], "stream_options": {"include_usage": true}}',
        400,
        "BadRequestError",
        "stream_options",
        "Stream options can only be defined when `stream=True`.",
    ),
    (
        b'{"messages": [], "max_tokens": 100000}',
        400,
        "BadRequestError",
        "max_tokens",
        "max_tokens=100000 cannot be greater than max_model_len=8192.",
    ),
    (
        b'{"messages": [{"role": "user", "content": "%s"}]}' % (b"x" * 40000),
        400,
        "BadRequestError",
        "input_tokens",
        "your prompt contains at least 8193 input tokens",
    ),
]


@pytest.mark.parametrize("case", ERRORS)
def test_bad_requests_get_vllm_error_shapes(
    faulty: httpx.Client, case: tuple[bytes, int, str, str | None, str]
) -> None:
    body, status, kind, param, text = case
    response = faulty.post(
        "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert list(error) == ["message", "type", "param", "code"]
    assert (error["type"], error["param"], error["code"]) == (kind, param, status)
    assert text in error["message"]


def test_completion_without_prompt_is_a_bad_request(faulty: httpx.Client) -> None:
    response = faulty.post("/v1/completions", json={"model": MODEL})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "prompt"


def test_unknown_routes_and_methods(faulty: httpx.Client) -> None:
    assert faulty.get("/v1/nothing").status_code == 404
    assert faulty.get("/v1/chat/completions").status_code == 405
    assert faulty.get("/health").status_code == 200
    assert faulty.get("/version").json() == {"version": "0.33.0"}

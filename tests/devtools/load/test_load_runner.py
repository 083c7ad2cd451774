"""The runner against a fake vLLM (uvicorn on 127.0.0.1) replaying real captures."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import httpx
import pytest
from load_fake_vllm import MODEL, FakeVllm, closed_port
from pydantic import ValidationError

from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.results import LoadResult, SpecDecoding
from specdec_exporter.devtools.load.runner import (
    ModelLookupError,
    Progress,
    error_kind,
    run_load,
)

pytestmark = pytest.mark.anyio


def config(url: str, **overrides: Any) -> LoadConfig:
    """8 requests, unless a duration bounds the run instead."""
    settings: dict[str, Any] = {
        "url": url,
        "model": MODEL,
        "concurrency": 4,
        "mix": parse_mix("0"),
        "seed": 1,
    }
    if "duration" not in overrides:
        settings["requests"] = 8
    return LoadConfig(**settings | overrides)


def spec_counts(spec: SpecDecoding | None) -> tuple[int, int, int] | None:
    if spec is None:
        return None
    return spec.num_spec_steps, spec.num_accepted_draft_tokens, spec.num_draft_tokens


async def test_plain_requests_carry_spec_metrics_and_usage(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url, mix=parse_mix("0:1,0.8:1")))
    assert (len(result.results), result.succeeded, result.model) == (8, 8, MODEL)
    assert sorted(r.index for r in result.results) == list(range(8))
    by_temperature = {r.temperature: spec_counts(r.spec) for r in result.results}
    assert by_temperature == {0.0: (23, 73, 92), 0.8: (46, 50, 184)}
    assert {(r.output_tokens, r.tokens_from_usage, r.stream, r.ttft) for r in result.results} == {
        (96, True, False, None)
    }
    assert {r.path for r in fake.received} == {"/v1/chat/completions"}
    body = fake.received[0].body
    assert body["messages"][0]["role"] == "user"
    assert (body["max_tokens"], "stream" in body) == (64, False)


async def test_streams_with_usage(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url, mix=parse_mix("0.8"), stream_share=1.0))
    assert result.succeeded == 8
    for request in result.results:
        assert (request.stream, request.chunks, request.content_chunks) == (True, 46, 44)
        assert (request.output_tokens, request.tokens_from_usage) == (96, True)
        assert spec_counts(request.spec) == (43, 52, 172)
        assert request.ttft is not None
        assert 0 < request.ttft <= request.latency
        assert request.tpot == pytest.approx((request.latency - request.ttft) / 95)
    assert all(r.body["stream_options"] == {"include_usage": True} for r in fake.received)


async def test_streams_without_usage_count_chunks(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url, stream_share=1.0, include_usage=False))
    assert {(r.output_tokens, r.tokens_from_usage, r.spec) for r in result.results} == {
        (41, False, None)
    }
    assert not any("stream_options" in r.body for r in fake.received)


async def test_completions_endpoint(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url, endpoint="completions", stream_share=0.5))
    assert result.succeeded == 8
    streamed = [r for r in result.results if r.stream]
    assert {(r.content_chunks, r.output_tokens) for r in streamed} == {(24, 96)}
    assert {r.path for r in fake.received} == {"/v1/completions"}
    assert all(isinstance(r.body["prompt"], str) for r in fake.received)


async def test_default_temperature_omits_the_key(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url, mix=parse_mix("default"), stream_share=0.5))
    assert {r.label for r in result.results} == {"default"}
    assert len(fake.received) == 8
    assert not any("temperature" in r.body for r in fake.received)
    plain = [r for r in result.results if not r.stream]
    assert {spec_counts(r.spec) for r in plain} == {(35, 63, 140)}


async def test_mix_and_stream_share_are_exact_with_a_seed(url: str, fake: FakeVllm) -> None:
    mix = parse_mix("0:0.3,0.7:0.5,1.0:0.2")
    result = await run_load(config(url, mix=mix, stream_share=0.5, requests=20, concurrency=3))
    sent = Counter((r.body["temperature"], bool(r.body.get("stream"))) for r in fake.received)
    assert sent == {
        (0.0, True): 3,
        (0.0, False): 3,
        (0.7, True): 5,
        (0.7, False): 5,
        (1.0, True): 2,
        (1.0, False): 2,
    }
    assert Counter(r.label for r in result.results) == {"0.0": 6, "0.7": 10, "1.0": 4}

    def order(run: LoadResult) -> list[tuple[float | None, bool]]:
        return [(r.temperature, r.stream) for r in sorted(run.results, key=lambda r: r.index)]

    again = await run_load(config(url, mix=mix, stream_share=0.5, requests=20, concurrency=3))
    assert order(again) == order(result)


@pytest.mark.parametrize(
    ("model", "stream_share", "kind"),
    [
        ("http-400", 0.0, "http_400"),
        ("http-500", 1.0, "http_500"),
        ("bad-json", 0.0, "malformed"),
        ("bad-json", 1.0, "malformed"),
        ("cut-stream", 0.0, "disconnect"),
        ("cut-stream", 1.0, "disconnect"),
        ("no-done", 1.0, "incomplete"),
        ("stream-error", 1.0, "stream_error"),
    ],
)
async def test_errors_are_counted_by_kind(
    url: str, fake: FakeVllm, model: str, stream_share: float, kind: str
) -> None:
    result = await run_load(config(url, model=model, stream_share=stream_share, requests=4))
    assert [r.error for r in result.results] == [kind] * 4
    assert result.succeeded == 0
    statuses = {r.status for r in result.results}
    if model.startswith("http-"):
        assert statuses == {int(model.removeprefix("http-"))}
    else:
        assert statuses <= {None, 200}


async def test_errors_do_not_stop_the_run(url: str, fake: FakeVllm) -> None:
    fake.fail_at[1.0] = "cut-stream"
    result = await run_load(
        config(url, mix=parse_mix("0:1,1.0:1"), requests=10, stream_share=0.5, concurrency=2)
    )
    errors = Counter((r.label, r.error) for r in result.results)
    assert errors == {("0.0", None): 5, ("1.0", "disconnect"): 5}


async def test_timeout_is_an_error_kind(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url, model="hang", requests=2, concurrency=2, timeout=0.2))
    assert [r.error for r in result.results] == ["timeout", "timeout"]


async def test_refused_connection_is_an_error_kind() -> None:
    result = await run_load(config(f"http://127.0.0.1:{closed_port()}", requests=3))
    assert [r.error for r in result.results] == ["connect"] * 3


def test_error_kind_mapping() -> None:
    request = httpx.Request("GET", "http://127.0.0.1/")
    assert error_kind(httpx.PoolTimeout("x", request=request)) == "timeout"
    assert error_kind(httpx.ConnectError("x", request=request)) == "connect"
    assert error_kind(httpx.ReadError("x", request=request)) == "disconnect"
    assert error_kind(httpx.RemoteProtocolError("x", request=request)) == "disconnect"
    assert error_kind(httpx.DecodingError("x", request=request)) == "malformed"


async def test_model_comes_from_v1_models(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url + "/v1/", model=None, requests=2))
    assert result.model == MODEL
    assert {r.body["model"] for r in fake.received} == {MODEL}


async def test_model_lookup_failure_is_one_error(url: str, fake: FakeVllm) -> None:
    fake.models_status = 503
    with pytest.raises(ModelLookupError, match="HTTP 503"):
        await run_load(config(url, model=None))
    with pytest.raises(ModelLookupError, match="connect"):
        await run_load(config(f"http://127.0.0.1:{closed_port()}", model=None))
    assert fake.received == []


async def test_connections_are_kept_alive_and_bounded(url: str, fake: FakeVllm) -> None:
    await run_load(config(url, requests=30, concurrency=2, stream_share=0.5))
    assert len(fake.received) == 30
    assert len({r.client for r in fake.received}) <= 2


async def test_progress_after_every_request(url: str, fake: FakeVllm) -> None:
    seen: list[Progress] = []
    fake.fail_at[1.0] = "http-500"
    await run_load(config(url, mix=parse_mix("0:1,1.0:1"), requests=6), seen.append)
    assert [p.done for p in seen] == [1, 2, 3, 4, 5, 6]
    assert seen[-1].errors == 3
    assert all(b.elapsed >= a.elapsed for a, b in itertools.pairwise(seen))


async def test_duration_stops_starting_requests(url: str, fake: FakeVllm) -> None:
    result = await run_load(config(url, duration=0.3, concurrency=2))
    assert len(result.results) >= 2
    # a request starts only if the deadline had not passed a moment before (0.1 s of slack)
    assert all(r.started < 0.4 for r in result.results)
    assert len(fake.received) == len(result.results)


async def test_api_key_is_sent_as_bearer_and_kept_out_of_repr(url: str, fake: FakeVllm) -> None:
    settings = config(url, api_key="sk-secret-123", requests=2)
    await run_load(settings)
    assert {r.headers["authorization"] for r in fake.received} == {"Bearer sk-secret-123"}
    assert "sk-secret-123" not in repr(settings)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"requests": 8, "duration": 5.0},
            "Value error, --duration is not allowed with --requests",
        ),
        ({"requests": 0}, "requests: Input should be greater than or equal to 1"),
        ({"duration": 0.0}, "duration: Input should be greater than or equal to 0.1"),
        ({"concurrency": 0}, "concurrency: Input should be greater than or equal to 1"),
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"stream_share": 1.5}, "stream_share: Input should be less than or equal to 1"),
        ({"mix": ()}, "mix: Tuple should have at least 1 item"),
        ({"prompts": ()}, "prompts: Tuple should have at least 1 item"),
        ({"url": "127.0.0.1:1"}, "url: Value error, expected an http:// or https:// URL"),
    ],
)
def test_config_rejects_nonsense(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        LoadConfig(**overrides)
    assert refused.value.error_count() == 1
    error = refused.value.errors()[0]
    where = "".join(f"{part}: " for part in error["loc"])
    assert f"{where}{error['msg']}".startswith(message)


def test_requests_bound_the_run_unless_a_duration_does() -> None:
    assert (LoadConfig().request_limit, LoadConfig(requests=3).request_limit) == (100, 3)
    assert LoadConfig(duration=2.5).request_limit is None

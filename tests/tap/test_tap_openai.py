"""A real client (the ``openai`` package) gets the same responses through the tap as directly,
from fakes that answer as the real vLLM captures did."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from tapfakes import (
    FIXTURES,
    MODEL,
    Handler,
    Received,
    Reply,
    chunk_sequence,
    consistent_vllm,
    fixture_response,
    fixture_stream,
    replay_vllm,
    running_tap,
    shape,
    without_usage,
)

from specdec_exporter.devtools.load.sse import DONE, SseDecoder

pytestmark = pytest.mark.anyio
MESSAGES: Any = [{"role": "user", "content": "def main():"}]


def client(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)


async def chat(base: str, **options: Any) -> Any:
    async with client(base) as api:
        return await api.chat.completions.create(model=MODEL, messages=MESSAGES, **options)


async def chat_stream(base: str, **options: Any) -> list[Any]:
    async with client(base) as api:
        stream = await api.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, **options
        )
        return [chunk.model_dump() async for chunk in stream]


def captured_request(document: dict[str, Any]) -> Received:
    return Received(
        "POST",
        document["path"],
        {"content-type": "application/json"},
        json.dumps(document["body"]).encode(),
    )


def real_headers(edge_case: str) -> dict[str, str]:
    headers: dict[str, str] = json.loads((FIXTURES / "edge-cases" / edge_case).read_text())[
        "headers"
    ]
    return headers


def assert_framed_like_vllm(reply: Reply, edge_case: str) -> None:
    """Status, content type and framing as the real vLLM answered a request of this kind."""
    real = real_headers(edge_case)
    assert reply.status == 200
    assert dict(reply.headers)["content-type"] == real["content-type"]
    assert reply.chunked == (real.get("transfer-encoding") == "chunked")
    assert reply.chunked != ("content-length" in real)


STREAMS = ["chat_T0p0_stream_0", "chat_T0p8_stream_0", "chat_T0p8_stream_no_include_usage_0"]
FAKES = [replay_vllm, consistent_vllm]


@pytest.mark.parametrize("fake", FAKES, ids=lambda fake: fake.__name__)
@pytest.mark.parametrize("capture", STREAMS)
def test_the_fake_streams_like_the_captures(fake: Handler, capture: str) -> None:
    """Asked what vLLM was asked, the fakes stream what vLLM streamed: the same chunk sequence
    (role chunk, content chunks, finish chunk, usage chunk only with include_usage, [DONE]),
    every chunk with vLLM's keys in vLLM's order and types, the fingerprint vLLM sent."""
    request = json.loads((FIXTURES / "streams" / f"{capture}.request.json").read_text())
    reply = fake(captured_request(request))
    assert_framed_like_vllm(reply, "chat_stream_true_options_absent.json")
    streamed, real = b"".join(reply.pieces), fixture_stream(f"{capture}.sse")
    assert chunk_sequence(streamed) == chunk_sequence(real)
    assert fingerprints(streamed) == fingerprints(real)


def fingerprints(stream: bytes) -> list[str]:
    decoder = SseDecoder()
    chunks = [json.loads(data) for data in decoder.feed(stream) if data != DONE]
    return [chunk["system_fingerprint"] for chunk in chunks if "system_fingerprint" in chunk]


def test_the_derived_greedy_stream_has_the_shape_of_a_real_one() -> None:
    """``consistent_vllm`` derives the greedy stream without include_usage (not captured) from
    the greedy one with it; the real captures show that temperature changes no shape."""
    with_usage = [fixture_stream(f"{name}.sse") for name in STREAMS[:2]]
    assert chunk_sequence(with_usage[0]) == chunk_sequence(with_usage[1])
    request = json.loads((FIXTURES / "streams" / f"{STREAMS[2]}.request.json").read_text())
    request["body"]["temperature"] = 0.0
    derived = b"".join(consistent_vllm(captured_request(request)).pieces)
    real = fixture_stream(f"{STREAMS[2]}.sse")
    assert chunk_sequence(derived) == chunk_sequence(real)
    assert fingerprints(derived) == fingerprints(real)
    assert derived != without_usage(fixture_stream(f"{STREAMS[1]}.sse"))  # the greedy one


@pytest.mark.parametrize("fake", FAKES, ids=lambda fake: fake.__name__)
@pytest.mark.parametrize("capture", sorted(p.name for p in (FIXTURES / "responses").iterdir()))
def test_the_fake_answers_like_the_captures(fake: Handler, capture: str) -> None:
    """Asked what vLLM was asked, the fakes answer with vLLM's response to that request."""
    document = fixture_response(capture)
    reply = fake(captured_request(document["request"]))
    assert_framed_like_vllm(reply, "chat_stream_false_options_absent.json")
    answered = json.loads(b"".join(reply.pieces))
    assert shape(answered) == shape(document["response"])
    assert answered == document["response"]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
async def test_non_streaming_identical(temperature: float) -> None:
    async with running_tap(consistent_vllm) as tap:
        direct = await chat(tap.settings.vllm_url, temperature=temperature)
        tapped = await chat(tap.url, temperature=temperature)
        assert tapped.model_dump() == direct.model_dump()
        assert sum(row.attributed for row in tap.stats.bucket_summary()) == 1


@pytest.mark.parametrize("options", [{}, {"stream_options": {"include_usage": True}}])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
async def test_streaming_identical(temperature: float, options: dict[str, Any]) -> None:
    async with running_tap(consistent_vllm) as tap:
        direct = await chat_stream(tap.settings.vllm_url, temperature=temperature, **options)
        tapped = await chat_stream(tap.url, temperature=temperature, **options)
        assert tapped == direct
        assert len(tapped) > 10
        assert (tapped[-1]["usage"] is not None) == bool(options)
        rows = tap.stats.bucket_summary()
        assert sum(row.attributed for row in rows) == 1  # the tap got metrics either way
        assert sum(row.draft_tokens for row in rows) == (92 if temperature == 0.0 else 172)

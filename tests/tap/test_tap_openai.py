"""A real client (the ``openai`` package) gets the same responses through the tap as directly."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from tapfakes import (
    MODEL,
    consistent_vllm,
    fixture_stream,
    running_tap,
    sse_events,
    without_usage,
)

pytestmark = pytest.mark.anyio
MESSAGES: Any = [{"role": "user", "content": "def main():"}]


def client(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)


async def chat(base: str, **options: Any) -> Any:
    async with client(base) as api:
        return await api.chat.completions.create(model=MODEL, messages=MESSAGES, **options)


async def chat_stream(base: str, **options: Any) -> list[Any]:
    async with client(base) as api:
        stream = await api.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                                   **options)
        return [chunk.model_dump() async for chunk in stream]


def test_the_fake_models_vllm_like_the_captures() -> None:
    derived = without_usage(fixture_stream("chat_T0p8_stream_0.sse"))
    real = fixture_stream("chat_T0p8_stream_no_include_usage_0.sse")
    assert len(sse_events(derived)[-2]) > 0
    assert sse_events(derived)[-2].endswith(sse_events(real)[-2][-48:])  # same fingerprint tail


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

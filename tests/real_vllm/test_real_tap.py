"""The tap in front of a real vLLM (CPU build, draft-model spec decoding, per-request metrics):
responses through the tap equal direct ones, stream rewrite included.

Part of the real-vLLM stage (``-m real_vllm``), on the stage's one server.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tap"))
from tapfakes import running_tap, sse_events

pytestmark = [pytest.mark.real_vllm, pytest.mark.anyio]
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real_vllm" / "server.py"
MODEL = "tiny-llama"
VOLATILE = re.compile(rb'"(id|created)":("[^"]*"|\d+)')


@pytest.fixture(scope="module")
def vllm_url(real_vllm: Any) -> str:
    """The stage's one real server (tests/real_vllm/conftest.py)."""
    return str(real_vllm.url).rstrip("/")


def body(stream: bool, include_usage: bool = False, temperature: float = 0.0) -> dict[str, Any]:
    document: dict[str, Any] = {
        "model": MODEL,
        "temperature": temperature,
        "seed": 7,
        "max_tokens": 48,
        "messages": [{"role": "user", "content": "def main():"}],
    }
    if stream:
        document["stream"] = True
    if include_usage:
        document["stream_options"] = {"include_usage": True}
    return document


def normalised(raw: bytes) -> bytes:
    """Request ids and timestamps differ between two requests; nothing else may."""
    return VOLATILE.sub(rb'"\1":"-"', raw)


async def post(url: str, document: dict[str, Any]) -> bytes:
    async with httpx.AsyncClient(timeout=120) as client:
        reply = await client.post(f"{url}/v1/chat/completions", json=document)
        assert reply.status_code == 200, reply.text
        return reply.content


@pytest.mark.parametrize("include_usage", [False, True])
async def test_greedy_stream_identical_through_the_tap(vllm_url: str, include_usage: bool) -> None:
    async with running_tap(upstream_url=vllm_url, models=frozenset({MODEL})) as tap:
        direct = await post(vllm_url, body(True, include_usage))
        tapped = await post(tap.url, body(True, include_usage))
        assert normalised(tapped) == normalised(direct)
        assert (b'"usage"' in tapped) == include_usage
        with_usage = await post(vllm_url, body(True, include_usage=True))
        final = json.loads(sse_events(with_usage)[-2].removeprefix(b"data: "))
        spec = final["metrics"]["speculative_decoding"]
        row = next(r for r in tap.stats.bucket_summary() if r.temperature_bucket == "0")
        assert (row.attributed, row.drafts, row.draft_tokens, row.accepted_tokens) == (
            1,
            spec["num_spec_steps"],
            spec["num_draft_tokens"],
            spec["num_accepted_draft_tokens"],
        )


async def test_non_streaming_identical_through_the_tap(vllm_url: str) -> None:
    async with running_tap(upstream_url=vllm_url, models=frozenset({MODEL})) as tap:
        direct = await post(vllm_url, body(False))
        tapped = await post(tap.url, body(False))
        assert normalised(tapped) == normalised(direct)
        spec = json.loads(direct)["metrics"]["speculative_decoding"]
        row = next(r for r in tap.stats.bucket_summary() if r.temperature_bucket == "0")
        assert (row.attributed, row.draft_tokens) == (1, spec["num_draft_tokens"])


async def test_sampled_stream_keeps_the_no_usage_shape(vllm_url: str) -> None:
    """T=0.8: texts may differ run to run, the structure may not."""
    async with running_tap(upstream_url=vllm_url, models=frozenset({MODEL})) as tap:
        direct = sse_events(await post(vllm_url, body(True, temperature=0.8)))
        tapped = sse_events(await post(tap.url, body(True, temperature=0.8)))
        assert tapped[-1] == direct[-1] == b"data: [DONE]\n\n"
        finish_direct = json.loads(direct[-2].removeprefix(b"data: "))
        finish_tapped = json.loads(tapped[-2].removeprefix(b"data: "))
        assert list(finish_tapped) == list(finish_direct)
        assert finish_tapped["system_fingerprint"] == finish_direct["system_fingerprint"]
        assert not any(b'"usage"' in event for event in tapped)
        assert sum(r.attributed for r in tap.stats.bucket_summary()) == 1

"""Every `stream` x `stream_options` combination with the official `openai` client, on real vLLM
directly and through the tap: the same chunks, usage and text either way, and vLLM's usage rule.

Part of the real-vLLM stage (``-m real_vllm``), on the stage's one server; greedy, so both runs
of a request give the same text.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from real_vllm.edge_cases import MODEL, STREAM_OPTIONS, STREAMS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tap"))
from tapfakes import running_tap

pytestmark = [pytest.mark.real_vllm, pytest.mark.anyio]
OPTIONS = ("absent", "empty", "usage_true", "usage_false", "continuous", "usage_continuous")
VOLATILE = ("id", "created")


def expected(stream: str, options: str) -> dict[str, Any]:
    """vLLM 0.32: stream_options needs stream=True unless empty; a usage chunk only when asked
    for with include_usage; a running usage on every chunk only with both flags."""
    if stream != "true":
        return {"status": 400 if options not in ("absent", "empty") else 200}
    asked = options in ("usage_true", "usage_continuous")
    return {"status": 200, "usage_chunk": asked, "running_usage": options == "usage_continuous"}


async def call(base: str, endpoint: str, stream: str, options: str) -> dict[str, Any]:
    """One request through the openai client: errors, completions and chunk lists as dicts."""
    fields: dict[str, Any] = {**STREAMS[stream], **STREAM_OPTIONS[options]}
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0) as api:
        try:
            if endpoint == "chat":
                answer = await api.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "class Foo:"}],
                    max_tokens=8,
                    temperature=0,
                    extra_body={"ignore_eos": True},
                    **fields,
                )
            else:
                answer = await api.completions.create(
                    model=MODEL,
                    prompt="class Foo:",
                    max_tokens=8,
                    temperature=0,
                    extra_body={"ignore_eos": True},
                    **fields,
                )
        except openai.APIStatusError as error:
            return {"status": error.status_code, "error": error.body}
        if stream == "true":
            chunks = [strip(chunk.model_dump()) async for chunk in answer]  # type: ignore[union-attr]
            return {"status": 200, "chunks": chunks}
        return {"status": 200, "body": strip(answer.model_dump())}  # type: ignore[union-attr]


def strip(document: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key not in VOLATILE}


def text_of(result: dict[str, Any]) -> str:
    choices = [
        c
        for chunk in result.get("chunks", [result.get("body", {})])
        for c in chunk.get("choices", [])
    ]
    return "".join(
        (c.get("delta") or {}).get("content")
        or c.get("text")
        or (c.get("message") or {}).get("content")
        or ""
        for c in choices
    )


def usage_of(result: dict[str, Any]) -> dict[str, Any]:
    chunks = result["chunks"]
    with_choices = [chunk for chunk in chunks if chunk["choices"]]
    return {
        "status": 200,
        "usage_chunk": any(not chunk["choices"] and chunk["usage"] for chunk in chunks),
        "running_usage": all(chunk.get("usage") for chunk in with_choices),
    }


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_same_through_the_tap(
    real_vllm: Any, endpoint: str, stream: str, options: str
) -> None:
    url = str(real_vllm.url).rstrip("/")
    async with running_tap(upstream_url=url, models=frozenset({MODEL})) as tap:
        direct = await call(url, endpoint, stream, options)
        tapped = await call(tap.url, endpoint, stream, options)
        counted = sum(row.attributed for row in tap.stats.bucket_summary())
    assert tapped == direct
    rule = expected(stream, options)
    if "chunks" in direct:
        assert usage_of(direct) == rule
        assert (direct["chunks"][-1]["choices"] == []) == rule["usage_chunk"]
    else:
        assert {"status": direct["status"]} == rule
    if direct["status"] == 200:
        assert text_of(direct) and text_of(tapped) == text_of(direct)
    # docs/tap.md: a stream with continuous_usage_stats alone is not rewritten, so unattributed
    attributable = direct["status"] == 200 and (stream, options) != ("true", "continuous")
    assert counted == (1 if attributable else 0)

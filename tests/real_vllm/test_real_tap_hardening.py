"""Issue 19 on a real vLLM (CPU build, draft-model spec decoding, per-request metrics): what vLLM
answers to a request with a trailer and to bodies in other encodings, and that the tap answers
and counts them the same way. Part of the real-vLLM stage (``-m real_vllm``)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tap"))
from tapfakes import running_tap, sse_events

pytestmark = [pytest.mark.real_vllm, pytest.mark.anyio]
MODEL = "tiny-llama"
CHAT = b"/v1/chat/completions"
VOLATILE = re.compile(rb'"(id|created)":("[^"]*"|\d+)')
DEADLINE = 60.0
"""Seconds for one answer from the tiny CPU model; the trailer bug held it for --proxy-timeout."""


@pytest.fixture(scope="module")
def vllm_url(real_vllm: Any) -> str:
    return str(real_vllm.url).rstrip("/")


def document(**fields: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "temperature": 0.0,
        "seed": 7,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "def main():"}],
        **fields,
    }


async def exchange(url: str, request: bytes) -> tuple[int, bytes]:
    """Raw bytes to ``url``'s host and port; the status and the (de-chunked) body."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(request)
        raw = await asyncio.wait_for(reader.read(), DEADLINE)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"\r\ntransfer-encoding: chunked" in head.lower():
        body = dechunk(body)
    return int(head.split(b" ")[1]), body


def dechunk(wire: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, wire = wire.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out, wire = out + wire[:size], wire[size + 2 :]


def chunked_with_trailer(body: bytes) -> bytes:
    half = len(body) // 2
    return (
        b"POST %b HTTP/1.1\r\nhost: vllm\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        % CHAT
        + b"%x\r\n%b\r\n%x\r\n%b\r\n" % (half, body[:half], len(body) - half, body[half:])
        + b"0\r\nX-Trailer: 1\r\n\r\n"
    )


def with_length(body: bytes) -> bytes:
    return (
        b"POST %b HTTP/1.1\r\nhost: vllm\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%b" % (CHAT, len(body), body)
    )


def normalised(raw: bytes) -> bytes:
    return VOLATILE.sub(rb'"\1":"-"', raw)


def row(tap: Any, bucket: str) -> tuple[int, int]:
    found = [r for r in tap.stats.bucket_summary() if r.temperature_bucket == bucket]
    return sum(r.requests for r in found), sum(r.attributed for r in found)


async def test_a_request_with_a_trailer_is_answered_as_vllm_answers_it(vllm_url: str) -> None:
    request = chunked_with_trailer(json.dumps(document()).encode())
    async with running_tap(upstream_url=vllm_url, models=frozenset({MODEL})) as tap:
        direct = await exchange(vllm_url, request)
        tapped = await exchange(tap.url, request)
        assert direct[0] == tapped[0] == 200
        assert normalised(tapped[1]) == normalised(direct[1])
        assert row(tap, "0") == (1, 1)


ENCODINGS = {
    "utf-8-bom": lambda text: b"\xef\xbb\xbf" + text.encode(),
    "utf-16": lambda text: text.encode("utf-16"),
    "utf-16-le": lambda text: text.encode("utf-16-le"),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
async def test_bodies_vllm_accepts_in_other_encodings_keep_their_bucket(
    vllm_url: str, encoding: str, stream: bool
) -> None:
    text = json.dumps(document(**({"stream": True} if stream else {})), ensure_ascii=False)
    request = with_length(ENCODINGS[encoding](text))
    async with running_tap(upstream_url=vllm_url, models=frozenset({MODEL})) as tap:
        direct = await exchange(vllm_url, request)
        tapped = await exchange(tap.url, request)
        assert direct[0] == tapped[0] == 200
        assert normalised(tapped[1]) == normalised(direct[1])
        # attributed unless a stream the tap may not rewrite (UTF-16: no include_usage insertion)
        attributed = int(not stream or encoding == "utf-8-bom")
        assert row(tap, "0") == (1, attributed)
        assert row(tap, "invalid") == (0, 0)
        if stream:
            assert not any(b'"usage"' in event for event in sse_events(tapped[1]))

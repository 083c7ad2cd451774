"""Through the tap, an upstream replaying real vLLM 0.32 captures: exact bytes, exact counts."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry
from tapfakes import (
    MODEL,
    Received,
    Reply,
    TapUnderTest,
    dechunk,
    fixture_response,
    fixture_stream,
    json_reply,
    post_request,
    raw_exchange,
    replay_vllm,
    running_tap,
    split_response,
    sse_events,
)

pytestmark = pytest.mark.anyio
CHAT = "/v1/chat/completions"


def registry_of(tap: TapUnderTest) -> CollectorRegistry:
    registry = CollectorRegistry()
    tap.stats.register(registry)
    return registry


def counts(tap: TapUnderTest, bucket: str) -> tuple[float | None, ...]:
    registry = registry_of(tap)
    labels = {"model_name": MODEL, "temperature_bucket": bucket}
    return (
        registry.get_sample_value("specdec_requests_total", {**labels, "attributed": "true"}),
        registry.get_sample_value("specdec_requests_total", {**labels, "attributed": "false"}),
        registry.get_sample_value("specdec_request_drafts_total", labels),
        registry.get_sample_value("specdec_request_draft_tokens_total", labels),
        registry.get_sample_value("specdec_request_accepted_tokens_total", labels),
    )


def spec_of(fixture: str) -> tuple[int, int, int]:
    spec = fixture_response(fixture)["response"]["metrics"]["speculative_decoding"]
    return spec["num_spec_steps"], spec["num_draft_tokens"], spec["num_accepted_draft_tokens"]


def request_body(fixture: str) -> bytes:
    return json.dumps(fixture_response(fixture)["request"]["body"]).encode()


@pytest.mark.parametrize(
    ("fixture", "bucket"),
    [("chat_T0p0_nonstream_0.json", "0"), ("chat_T0p8_nonstream_0.json", "0.7-1.0")],
)
async def test_non_streaming_exact_bytes_and_counts(fixture: str, bucket: str) -> None:
    async with running_tap() as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, request_body(fixture)))
        head, body = split_response(raw)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert body == json.dumps(fixture_response(fixture)["response"]).encode()
        assert head.lower() == (
            b"http/1.1 200 ok\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close" % len(body)
        )
        assert tap.upstream.received[0].body == request_body(fixture)  # passed on unchanged
        assert counts(tap, bucket) == (1, 0, *spec_of(fixture))


async def test_missing_temperature_uses_the_configured_default() -> None:
    fixture = "chat_no_temperature_nonstream_0.json"
    async with running_tap(default_temperature=0.6) as tap:
        await raw_exchange(tap.address, post_request(CHAT, request_body(fixture)))
        assert counts(tap, "0.5-0.7") == (1, 0, *spec_of(fixture))


async def test_n2_has_no_metrics_so_it_is_unattributed() -> None:
    fixture = "chat_n2_T0p8_nonstream_0.json"
    async with running_tap() as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, request_body(fixture)))
        assert split_response(raw)[1] == json.dumps(fixture_response(fixture)["response"]).encode()
        assert counts(tap, "0.7-1.0") == (0, 1, 0, 0, 0)


async def test_stream_with_include_usage_passes_every_byte_including_chunk_framing() -> None:
    stream = fixture_stream("chat_T0p8_stream_0.sse")
    body = json.dumps(
        {
            "model": MODEL,
            "temperature": 0.8,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [],
        }
    ).encode()
    async with running_tap() as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, body))
        head, wire = split_response(raw)
        expected = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in sse_events(stream))
        assert wire == expected + b"0\r\n\r\n"
        assert head.lower() == (
            b"http/1.1 200 ok\r\ncontent-type: text/event-stream; "
            b"charset=utf-8\r\ntransfer-encoding: chunked\r\n"
            b"connection: close"
        )
        assert tap.upstream.received[0].body == body
        assert counts(tap, "0.7-1.0") == (1, 0, 43, 172, 52)


async def test_stream_without_include_usage_gets_the_no_usage_structure() -> None:
    with_usage = fixture_stream("chat_T0p8_stream_0.sse")
    body = json.dumps({"model": MODEL, "temperature": 0.8, "stream": True, "messages": []}).encode()
    async with running_tap() as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, body))
        sent_upstream = tap.upstream.received[0].json()
        assert sent_upstream["stream_options"] == {"include_usage": True}
        events = sse_events(dechunk(split_response(raw)[1]))
        original = sse_events(with_usage)
        assert events[:-2] == original[:-3]  # every other byte unchanged
        assert (
            events[-2]
            == original[-3].removesuffix(b"}\n\n")
            + b',"system_fingerprint":"vllm-0.32.0-52476dec"}\n\n'
        )
        assert events[-1] == b"data: [DONE]\n\n"
        assert not any(b'"usage"' in event for event in events)
        assert counts(tap, "0.7-1.0") == (1, 0, 43, 172, 52)


async def test_rewritten_stream_keeps_one_chunk_per_event() -> None:
    body = json.dumps({"model": MODEL, "temperature": 0.0, "stream": True}).encode()
    async with running_tap() as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, body))
        wire = split_response(raw)[1]
        events = sse_events(dechunk(wire))
        assert wire == b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        assert counts(tap, "0") == (1, 0, 23, 92, 73)


async def test_completions_path_is_inspected_too() -> None:
    async with running_tap() as tap:
        body = json.dumps({"model": MODEL, "temperature": 0.0, "prompt": "x"}).encode()
        await raw_exchange(tap.address, post_request("/v1/completions", body))
        assert counts(tap, "0")[0] == 1


async def test_other_paths_pass_unchanged_and_are_not_counted() -> None:
    def models(_: Received) -> Reply:
        return json_reply({"object": "list", "data": [{"id": MODEL}]})

    async with running_tap(models) as tap:
        raw = await raw_exchange(
            tap.address,
            b"GET /v1/models?x=1 HTTP/1.1\r\nhost: tap\r\n"
            b"authorization: Bearer sk-secret\r\nconnection: close\r\n\r\n",
        )
        assert split_response(raw)[1] == b'{"object": "list", "data": [{"id": "tiny-llama"}]}'
        received = tap.upstream.received[0]
        assert (received.method, received.target) == ("GET", "/v1/models?x=1")
        assert received.headers["authorization"] == "Bearer sk-secret"
        assert all(row.requests == 0 for row in tap.stats.bucket_summary())


async def test_replay_handler_sanity() -> None:
    """The fake upstream itself answers like the captures (guards the other tests)."""
    reply = replay_vllm(Received("POST", CHAT, {}, b'{"stream": true}'))
    assert b"".join(reply.pieces) == fixture_stream("chat_T0p8_stream_no_include_usage_0.sse")

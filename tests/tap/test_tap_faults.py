"""Faults: upstream down or dying, clients leaving, hostile bodies, label floods, logs."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest
from prometheus_client import CollectorRegistry
from tapfakes import (
    MODEL,
    Received,
    Reply,
    dechunk,
    fixture_stream,
    json_reply,
    post_request,
    raw_exchange,
    replay_vllm,
    running_tap,
    split_response,
    sse_reply,
    wait_until,
)

from specdec_exporter.tap.sse import UsageWatcher

pytestmark = pytest.mark.anyio
CHAT = "/v1/chat/completions"
STREAM_BODY = json.dumps(
    {"model": MODEL, "temperature": 0.8, "stream": True, "messages": []}
).encode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def requests_in(
    tap_stats: object, bucket: str, attributed: str = "false", model: str = MODEL
) -> float | None:
    registry = CollectorRegistry()
    tap_stats.register(registry)  # type: ignore[attr-defined]
    return registry.get_sample_value(
        "specdec_requests_total",
        {"model_name": model, "temperature_bucket": bucket, "attributed": attributed},
    )


async def test_upstream_down_gives_502_in_openai_error_shape() -> None:
    async with running_tap(upstream_url=f"http://127.0.0.1:{free_port()}") as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, STREAM_BODY))
        head, body = split_response(raw)
        assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
        error = json.loads(body)["error"]
        assert error["code"] == 502 and error["type"] == "BadGateway"
        assert set(error) == {"message", "type", "param", "code"}
        assert requests_in(tap.stats, "0.7-1.0") == 1


async def test_upstream_dies_mid_stream() -> None:
    stream = fixture_stream("chat_T0p8_stream_0.sse")
    async with running_tap(lambda _: sse_reply(stream, die_after=5)) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, STREAM_BODY))
        head, wire = split_response(raw)
        assert head.startswith(b"HTTP/1.1 200")
        assert wire.count(b"data: ") == 5
        assert not wire.endswith(b"0\r\n\r\n")  # the client sees a truncated body, not an end
        assert requests_in(tap.stats, "0.7-1.0") == 1


async def test_client_disconnect_mid_stream_reaches_upstream() -> None:
    stream = fixture_stream("chat_T0p8_stream_0.sse")
    async with running_tap(lambda _: sse_reply(stream, hold_open=True)) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(post_request(CHAT, STREAM_BODY, close=False))
        await reader.readuntil(b"data: [DONE]")
        writer.close()
        await asyncio.wait_for(tap.upstream.disconnected.wait(), 5)
        assert tap.upstream.disconnects == 1
        await wait_until(lambda: requests_in(tap.stats, "0.7-1.0") == 1)


async def test_client_disconnect_before_any_answer_reaches_upstream() -> None:
    async with running_tap(lambda _: Reply(hang=True)) as tap:
        _reader, writer = await asyncio.open_connection(*tap.address)
        writer.write(post_request(CHAT, STREAM_BODY, close=False))
        await wait_until(lambda: len(tap.upstream.received) == 1)
        writer.close()
        await asyncio.wait_for(tap.upstream.disconnected.wait(), 5)


async def test_upstream_silence_times_out_with_504() -> None:
    async with running_tap(lambda _: Reply(hang=True), proxy_timeout=0.2) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, STREAM_BODY))
        assert raw.startswith(b"HTTP/1.1 504 Gateway Timeout\r\n")
        await asyncio.wait_for(tap.upstream.disconnected.wait(), 5)


async def test_a_slow_but_steady_stream_outlives_the_timeout() -> None:
    """The timeout is for silence, not for a stream's length: vLLM's reads are counted, and each
    sweep that sees the count move restarts the clock."""
    stream = fixture_stream("chat_T0p8_stream_0.sse")
    reply = sse_reply(stream, pace=0.02)
    assert len(reply.pieces) * reply.pace > 4 * 0.15  # longer than the timeout, several times
    async with running_tap(lambda _: reply, proxy_timeout=0.15) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, STREAM_BODY))
        head, body = split_response(raw)
        assert head.startswith(b"HTTP/1.1 200")
        assert body.endswith(b"0\r\n\r\n")  # the whole stream, its last chunk included
        assert tap.upstream.disconnects == 0


async def test_a_stream_that_goes_silent_is_cut() -> None:
    stream = fixture_stream("chat_T0p8_stream_0.sse")
    reply = sse_reply(stream, hold_open=True)
    async with running_tap(lambda _: reply, proxy_timeout=0.15) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, STREAM_BODY))  # until closed
        head, body = split_response(raw)
        assert head.startswith(b"HTTP/1.1 200")
        assert not body.endswith(b"0\r\n\r\n")  # cut: no last chunk
        await asyncio.wait_for(tap.upstream.disconnected.wait(), 5)


async def test_invalid_json_passes_through_counted_invalid() -> None:
    error = {
        "error": {"message": "bad json", "type": "BadRequestError", "param": None, "code": 400}
    }
    async with running_tap(lambda _: json_reply(error, status=400)) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, b"{not json"))
        assert raw.startswith(b"HTTP/1.1 400")
        assert json.loads(split_response(raw)[1]) == error
        assert tap.upstream.received[0].body == b"{not json"
        assert requests_in(tap.stats, "invalid") == 1


@pytest.mark.parametrize(
    ("temperature", "bucket"),
    [
        (b'"0.5"', "invalid"),
        (b"NaN", "invalid"),
        (b"-1", "invalid"),
        (b"Infinity", "invalid"),
        (b"[0.5]", "invalid"),
        (b"null", "0.7-1.0"),
        (b"1e300", "1.0+"),
        (b"0", "0"),
    ],
)
async def test_odd_temperatures(temperature: bytes, bucket: str) -> None:
    body = b'{"model": "tiny-llama", "messages": [], "temperature": ' + temperature + b"}"
    reply = json_reply({"object": "chat.completion", "metrics": None})
    async with running_tap(lambda _: reply) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, body))
        assert raw.startswith(b"HTTP/1.1 200")
        assert tap.upstream.received[0].body == body
        assert requests_in(tap.stats, bucket) == 1


async def test_body_over_the_cap_is_forwarded_uninspected() -> None:
    body = json.dumps(
        {
            "model": MODEL,
            "temperature": 0.0,
            "stream": True,
            "messages": [{"role": "user", "content": "x" * 5000}],
        }
    ).encode()
    async with running_tap(replay_vllm, proxy_inspect_max_bytes=1024) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, body))
        assert raw.startswith(b"HTTP/1.1 200")
        assert tap.upstream.received[0].body == body  # no include_usage added
        assert b'"usage"' not in raw
        assert requests_in(tap.stats, "unknown") == 1


async def test_chunked_body_over_the_cap_is_streamed_through() -> None:
    body = json.dumps({"model": MODEL, "temperature": 0.0, "x": "y" * 3000}).encode()
    pieces = [body[i : i + 700] for i in range(0, len(body), 700)]
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: tap\r\ntransfer-encoding: chunked"
        b"\r\nconnection: close\r\n\r\n" + chunked
    )
    async with running_tap(replay_vllm, proxy_inspect_max_bytes=1024) as tap:
        raw = await raw_exchange(tap.address, request)
        assert raw.startswith(b"HTTP/1.1 200")
        assert tap.upstream.received[0].body == body
        assert tap.upstream.received[0].headers["transfer-encoding"] == "chunked"
        assert requests_in(tap.stats, "unknown") == 1


async def test_ten_thousand_model_names_keep_labels_bounded() -> None:
    reply = json_reply({"object": "chat.completion", "metrics": None})
    async with running_tap(lambda _: reply) as tap:
        reader, writer = await asyncio.open_connection(*tap.address)
        for index in range(10_000):
            body = b'{"model": "m%d", "temperature": 0.8}' % index
            writer.write(post_request(CHAT, body, close=False))
            await reader.readuntil(b"null}")
        writer.close()
        rows = tap.stats.bucket_summary()
        assert {row.model_name for row in rows} == {MODEL, "other"}
        assert requests_in(tap.stats, "0.7-1.0", model="other") == 10_000


async def test_logs_never_carry_bodies_or_keys(caplog: pytest.LogCaptureFixture) -> None:
    secret_prompt = "my-secret-prompt-text"
    body = json.dumps(
        {
            "model": MODEL,
            "temperature": 0.1,
            "stream": True,
            "messages": [{"role": "user", "content": secret_prompt}],
        }
    ).encode()
    extra = ("authorization: Bearer sk-very-secret-key",)
    caplog.set_level(logging.DEBUG)
    async with running_tap(tolerant_vllm) as tap:
        await raw_exchange(tap.address, post_request(CHAT, body, extra=extra))
        await raw_exchange(tap.address, post_request(CHAT, b"{broken " + body, extra=extra))
    async with running_tap(upstream_url=f"http://127.0.0.1:{free_port()}") as tap:
        await raw_exchange(tap.address, post_request(CHAT, body, extra=extra))
    async with running_tap(lambda _: Reply(hang=True), proxy_timeout=0.1) as tap:
        await raw_exchange(tap.address, post_request(CHAT, body, extra=extra))
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "tap" in text  # something was logged (listening, the connect failure, the timeout)
    for secret in (secret_prompt, "sk-very-secret-key", "aiaiai", "Bearer"):
        assert secret not in text


def tolerant_vllm(request: Received) -> Reply:
    try:
        request.json()
    except ValueError:
        return json_reply({"error": {"message": "bad", "code": 400}}, status=400)
    return replay_vllm(request)


def test_received_helper_parses_json() -> None:
    assert Received("POST", "/", {}, b'{"a": 1}').json() == {"a": 1}


@pytest.mark.injects_faults  # deselected for the compiled tap: its calls are bound at build time
async def test_a_response_inspection_bug_fails_open(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: UsageWatcher, piece: bytes) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(UsageWatcher, "feed", broken)
    stream = fixture_stream("chat_T0p8_stream_0.sse")
    body = json.dumps(
        {
            "model": MODEL,
            "temperature": 0.8,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    async with running_tap(lambda _: sse_reply(stream)) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, body))
        assert dechunk(split_response(raw)[1]) == stream
        assert requests_in(tap.stats, "0.7-1.0") == 1  # counted, not attributed


@pytest.mark.injects_faults
async def test_a_request_inspection_bug_fails_open(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr("specdec_exporter.tap.request_side.plan_request", broken)
    async with running_tap() as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, STREAM_BODY))
        assert raw.startswith(b"HTTP/1.1 200")
        assert tap.upstream.received[0].body == STREAM_BODY
        assert requests_in(tap.stats, "unknown") == 1


async def test_a_broken_known_models_callback_does_not_stop_traffic() -> None:
    def broken() -> frozenset[str]:
        raise RuntimeError("bug")

    async with running_tap(models=broken) as tap:
        raw = await raw_exchange(tap.address, post_request(CHAT, STREAM_BODY))
        assert raw.startswith(b"HTTP/1.1 200")
        assert requests_in(tap.stats, "0.7-1.0", attributed="true", model="other") == 1

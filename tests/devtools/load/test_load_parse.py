"""SSE decoding and response parsing, on the real vLLM 0.32 captures."""

from __future__ import annotations

import json

import pytest
from load_fake_vllm import FIXTURES

from specdec_exporter.devtools.load.parse import (
    MalformedResponseError,
    ServerStreamError,
    StreamTally,
    parse_completion,
)
from specdec_exporter.devtools.load.results import SpecDecoding
from specdec_exporter.devtools.load.sse import SseDecoder


def stream_bytes(name: str) -> bytes:
    return (FIXTURES / "streams" / name).read_bytes()


def decode_in_pieces(raw: bytes, size: int) -> list[bytes]:
    decoder = SseDecoder()
    events = []
    for start in range(0, len(raw), size):
        events += decoder.feed(raw[start : start + size])
    return events + decoder.close()


def test_events_are_the_same_whatever_the_split() -> None:
    raw = stream_bytes("chat_T0p8_stream_0.sse")
    whole = decode_in_pieces(raw, len(raw))
    assert len(whole) == 47
    assert whole[-1] == b"[DONE]"
    assert json.loads(whole[0])["object"] == "chat.completion.chunk"
    for size in (1, 7, 64, 500):
        assert decode_in_pieces(raw, size) == whole


def test_crlf_multiline_comments_and_unterminated_tail() -> None:
    raw = b": keep-alive\r\nevent: x\r\ndata: a\r\ndata:b\r\n\r\nid: 3\ndata: [DONE]"
    assert decode_in_pieces(raw, 5) == [b"a\nb", b"[DONE]"]


def tally_of(name: str) -> StreamTally:
    tally = StreamTally(started=0.0)
    events = SseDecoder().feed(stream_bytes(name))
    for second, payload in enumerate(events, start=1):
        tally.add(payload, now=float(second))
    return tally


def test_stream_with_usage_gives_exact_tokens_and_spec_metrics() -> None:
    tally = tally_of("chat_T0p8_stream_0.sse")
    assert tally.done
    assert (tally.chunks, tally.content_chunks) == (46, 44)
    assert (tally.usage_tokens, tally.output_tokens) == (96, 96)
    assert tally.ttft == 2.0  # chunk 1 is the role chunk with empty content
    assert tally.spec == SpecDecoding(
        num_spec_steps=43,
        num_draft_tokens=172,
        num_accepted_draft_tokens=52,
        num_spec_tokens=4,
        mean_acceptance_length=2.2093023255813953,
        draft_acceptance_rate=0.3023255813953488,
        acceptance_histogram=(19, 12, 3, 2, 7),
    )
    assert tally.spec.raw["num_spec_tokens"] == 4


def test_greedy_stream_spec_metrics() -> None:
    tally = tally_of("chat_T0p0_stream_0.sse")
    assert (tally.chunks, tally.content_chunks, tally.output_tokens) == (26, 24, 96)
    assert tally.spec is not None
    assert (
        tally.spec.num_spec_steps,
        tally.spec.num_accepted_draft_tokens,
        tally.spec.num_draft_tokens,
    ) == (23, 73, 92)


def test_stream_without_usage_counts_content_chunks() -> None:
    tally = tally_of("chat_T0p8_stream_no_include_usage_0.sse")
    assert tally.done
    assert (tally.usage_tokens, tally.spec) == (None, None)
    assert (tally.chunks, tally.content_chunks, tally.output_tokens) == (42, 41, 41)


def test_completions_text_counts_as_content() -> None:
    tally = StreamTally(started=0.0)
    tally.add(b'{"choices": [{"index": 0, "text": ""}]}', now=1.0)
    tally.add(b'{"choices": [{"index": 0, "text": "hi"}]}', now=2.5)
    assert (tally.chunks, tally.content_chunks, tally.ttft, tally.done) == (2, 1, 2.5, False)


def test_error_event_and_bad_chunks_raise() -> None:
    tally = StreamTally(started=0.0)
    with pytest.raises(ServerStreamError):
        tally.add(b'{"error": {"message": "engine died"}}', now=1.0)
    with pytest.raises(ServerStreamError):
        tally.add(b'{"object": "error", "message": "x"}', now=1.0)
    for payload in (b"{not json", b"[1, 2]", b'{"choices": {"a": 1}}', b'{"choices": [3]}'):
        with pytest.raises(MalformedResponseError):
            tally.add(payload, now=1.0)


def response_bytes(name: str) -> bytes:
    document = json.loads((FIXTURES / "responses" / name).read_text())
    return json.dumps(document["response"]).encode()


@pytest.mark.parametrize(
    ("name", "steps", "accepted", "drafted"),
    [
        ("chat_T0p0_nonstream_0.json", 23, 73, 92),
        ("chat_T0p8_nonstream_0.json", 46, 50, 184),
        ("chat_no_temperature_nonstream_0.json", 35, 63, 140),
    ],
)
def test_plain_response_spec_metrics(name: str, steps: int, accepted: int, drafted: int) -> None:
    completion = parse_completion(response_bytes(name))
    assert completion.output_tokens == 96
    assert completion.spec is not None
    assert (
        completion.spec.num_spec_steps,
        completion.spec.num_accepted_draft_tokens,
        completion.spec.num_draft_tokens,
        completion.spec.num_spec_tokens,
    ) == (steps, accepted, drafted, 4)


def test_n2_response_has_null_metrics() -> None:
    completion = parse_completion(response_bytes("chat_n2_T0p8_nonstream_0.json"))
    assert (completion.output_tokens, completion.spec) == (192, None)


@pytest.mark.parametrize("body", [b"{not json", b"[]", b'{"id": "x"}', b'{"choices": 3}'])
def test_malformed_plain_response(body: bytes) -> None:
    with pytest.raises(MalformedResponseError):
        parse_completion(body)


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        {"num_spec_steps": 1, "num_draft_tokens": 4},
        {"num_spec_steps": True, "num_draft_tokens": 4, "num_accepted_draft_tokens": 1},
        {"num_spec_steps": -1, "num_draft_tokens": 4, "num_accepted_draft_tokens": 1},
    ],
)
def test_incomplete_spec_object_is_ignored(value: object) -> None:
    assert SpecDecoding.from_json(value) is None

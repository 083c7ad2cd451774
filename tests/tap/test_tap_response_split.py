"""Whole upstream responses (interim 1xx, trailers, 204, 304, chunked or with a length, an
unknown transfer coding) cut into reads at random points: the client gets each one whole, the
same however it was cut (``responsewire.check``). The fuzz twin is fuzz/fuzz_tap_response.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from responsewire import KINDS, check, relay

TOKEN = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=8).map(str.encode)
VALUE = st.text("abcdefghijklmnopqrstuvwxyz0123456789 ;=/", max_size=12).map(
    lambda text: text.strip().encode()
)
FIELDS = st.lists(st.tuples(TOKEN.map(lambda name: b"x-" + name), VALUE), max_size=3)
SSE = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'


def field_lines(fields: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(name + b": " + value + b"\r\n" for name, value in fields)


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    interim = draw(
        st.lists(st.sampled_from([100, 102, 103]).map(lambda s: (s, draw(FIELDS))), max_size=2)
    )
    status = draw(st.sampled_from([200, 200, 204, 304, 404, 500]))
    headers = draw(FIELDS)
    event_stream = draw(st.booleans())
    if event_stream:
        headers.append((b"content-type", b"text/event-stream; charset=utf-8"))
    body = draw(st.lists(st.sampled_from([SSE, b"data: [DONE]\n\n", b"x" * 7, b"y"]), max_size=4))
    framing = draw(
        st.sampled_from(
            [
                "chunked",
                "length",
                "gzip, chunked",
                "chunked, chunked",
                "chunked\r\nTransfer-Encoding: chunked",
            ]
        )
    )
    head = b"HTTP/1.1 %d Some Reason\r\n" % status + field_lines(headers)
    out = b"".join(
        b"HTTP/1.1 %d Interim Reason\r\n" % code + field_lines(extra) + b"\r\n"
        for code, extra in interim
    )
    if status in (204, 304):
        return out + head + b"\r\n"
    if framing == "length":
        data = b"".join(body)
        return out + head + b"content-length: %d\r\n\r\n" % len(data) + data
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in body if part)
    trailers = field_lines(draw(FIELDS))
    return (
        out
        + head
        + b"transfer-encoding: %b\r\n\r\n" % framing.encode()
        + chunks
        + b"0\r\n"
        + trailers
        + b"\r\n"
    )


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    response=responses(),
    cuts=st.lists(st.integers(min_value=1, max_value=2000), max_size=8),
)
def test_responses_split_anywhere_reach_the_client_whole(
    kind: str, response: bytes, cuts: list[int]
) -> None:
    check(kind, response, [cut % len(response) for cut in cuts])


TRAILERS_IN_ONE_READ = (
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nx-sum: 1\r\n\r\n"
)


@pytest.mark.parametrize("kind", KINDS)
def test_trailers_in_the_head_read_reach_the_client(kind: str) -> None:
    """The issue 19 case, as a literal: the whole response in one read."""
    output = relay(kind, TRAILERS_IN_ONE_READ, [])
    assert output.startswith(b"HTTP/1.1 200")
    check(kind, TRAILERS_IN_ONE_READ, [])


def test_a_reason_phrase_cut_across_reads_reaches_the_client_whole() -> None:
    """Found by fuzz/fuzz_tap_response.py: the parser hands the reason phrase over in pieces
    when the status line spans two reads, and only the last piece was kept."""
    response = b"HTTP/1.1 200 All Fine Here\r\ncontent-length: 2\r\n\r\nok"
    for cut in range(13, 26):
        output = relay("GET", response, [cut])
        assert output.startswith(b"HTTP/1.1 200 All Fine Here\r\n"), (cut, output[:40])

"""Property tests of the tap with Hypothesis: bodies pass byte for byte, and request framing
agrees with h11, the reference HTTP/1.1 parser, except where this file documents why not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tapwire import Answer, Forwarded, Harness, Reply, ok_answer, read_reply

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Bounded so the file runs in seconds; 3,000 examples each also pass."""
SMALL_CAP = 512


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    wire = Harness(default={}, small={"proxy_inspect_max_bytes": SMALL_CAP})
    wire.run(wire.start())
    yield wire
    wire.close()


# (b) request framing against h11
#
# A quirk is one deliberate deviation in a generated request. Where h11 and the tap disagree
# on a quirk, the table says which way and why. The tap parses with httptools (llhttp), as
# uvicorn (vLLM's server) does, so "the tap rejects" there means "vLLM would reject it too".

STRICTER = "the tap (llhttp, as uvicorn in front of vLLM) rejects what h11 accepts"
WAITS = "h11 reads on into the chunk data (then waits, or fails later); llhttp rejects at once"
LENIENT = "the tap accepts, as uvicorn does, and what it forwards is well-framed HTTP/1.1"
QUIRKS: dict[str, tuple[frozenset[str], str, str]] = {
    # quirk: (h11's verdicts, the tap's verdict, why)
    "dup-content-length": (frozenset({"accept"}), "reject", STRICTER),
    "content-length-list": (frozenset({"accept"}), "reject", STRICTER),
    "length-and-chunked": (frozenset({"accept"}), "reject", STRICTER + " (RFC 9112 6.3 allows)"),
    "chunk-size-space": (frozenset({"accept"}), "reject", STRICTER),
    "bare-extension": (frozenset({"accept"}), "reject", STRICTER),
    "extension-trailing-space": (frozenset({"accept"}), "reject", STRICTER),
    "lowercase-method": (frozenset({"accept"}), "reject", STRICTER),
    "unknown-method": (frozenset({"accept"}), "reject", STRICTER),
    "obs-fold": (frozenset({"accept"}), "reject", STRICTER + " (RFC 9112 5.2 allows a 400)"),
    "bare-lf-head": (frozenset({"accept"}), "reject", STRICTER),
    "control-in-value": (frozenset({"accept"}), "reject", STRICTER),
    "del-in-value": (frozenset({"accept"}), "reject", STRICTER),
    "http2-version": (frozenset({"accept"}), "reject", "HTTP/2.0 is refused with a 505"),
    "crlf-in-quoted-extension": (frozenset({"need", "reject"}), "reject", WAITS),
    "bare-lf-chunked": (frozenset({"need", "reject"}), "reject", WAITS),
    "chunk-size-overflow": (frozenset({"need", "reject"}), "reject", WAITS),
    "0x-chunk-size": (frozenset({"reject"}), "reject", ""),
    "no-crlf-after-data": (frozenset({"reject"}), "reject", ""),
    "space-before-colon": (frozenset({"reject"}), "reject", ""),
    "bad-content-length": (frozenset({"reject"}), "reject", ""),
    "non-ascii-target": (frozenset({"reject"}), "reject", ""),
    "two-hosts": (frozenset({"reject"}), "reject", ""),
    "gzip-chunked": (frozenset({"reject"}), "reject", ""),
    "http09": (frozenset({"reject"}), "reject", ""),
    "no-host": (
        frozenset({"reject"}),
        "accept",
        LENIENT + ": HTTP/1.1 without Host; vLLM's authority is sent as Host",
    ),
    "leading-crlf": (
        frozenset({"reject"}),
        "accept",
        LENIENT + ": an empty line before a request (RFC 9112 2.2 says ignore it)",
    ),
    "long-chunk-size": (
        frozenset({"reject"}),
        "accept",
        LENIENT + ": over 20 hex digits (leading zeros); sent with a length",
    ),
}
CHUNK_QUIRKS = {
    "chunk-size-space",
    "bare-extension",
    "extension-trailing-space",
    "crlf-in-quoted-extension",
    "bare-lf-chunked",
    "chunk-size-overflow",
    "0x-chunk-size",
    "no-crlf-after-data",
    "long-chunk-size",
    "length-and-chunked",
    "gzip-chunked",
}
LENGTH_QUIRKS = {"dup-content-length", "content-length-list", "bad-content-length"}


@dataclass
class Spec:
    """One generated request: what it means, and the raw bytes that say it."""

    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]
    """End-to-end headers, forwarded as they are."""
    hop: list[tuple[bytes, bytes]]
    """Hop-by-hop headers (and those Connection names): never forwarded."""
    host: bytes | None
    body: bytes
    framing: str
    chunks: list[tuple[bytes, bytes]]
    expect: bool
    quirk: str | None
    raw: bytes = b""

    @property
    def keep_alive(self) -> bool:
        closing = any(name == b"connection" and b"close" in value for name, value in self.hop)
        return self.version == b"1.1" and not closing


NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=10)
VALUES = st.binary(max_size=20).map(
    lambda raw: bytes(b if 0x21 <= b <= 0x7E or b >= 0x80 else 0x61 for b in raw) or b"v"
)
TARGETS = st.one_of(
    st.sampled_from(
        [
            b"/",
            b"/health",
            b"/v1/models",
            b"/v1/chat/completions",
            b"/v1/completions",
            b"/a/b?c=d&e=%20",
            b"http://vllm:8000/v1/models",
            b"/x#frag",
            b"/v1/chat/%63ompletions",
            b"/a|b{}",
        ]
    ),
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@%/", max_size=20).map(
        lambda path: b"/" + path.encode()
    ),
)
EXTENSIONS = [b"", b";a", b";a=b", b';a="b c"', b";x="]


@st.composite
def chunkings(draw: st.DrawFn, body: bytes) -> list[tuple[bytes, bytes]]:
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return [(piece, draw(st.sampled_from(EXTENSIONS))) for piece in pieces if piece]


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    quirk = draw(st.one_of(st.none(), st.none(), st.sampled_from(sorted(QUIRKS))))
    framing = draw(st.sampled_from(["none", "length", "chunked"]))
    if quirk in CHUNK_QUIRKS:
        framing = "chunked"
    elif quirk in LENGTH_QUIRKS:
        framing = "length"
    body = draw(st.binary(max_size=300)) if framing != "none" else b""
    if quirk in CHUNK_QUIRKS:
        body = body or b"x"
    hop = draw(
        st.sampled_from(
            [
                [],
                [(b"connection", b"keep-alive")],
                [(b"connection", b"x-hop"), (b"x-hop", b"1")],
                [(b"te", b"trailers")],
                [(b"keep-alive", b"timeout=5")],
            ]
        )
    )
    if draw(st.integers(0, 5)) == 0:
        hop = [*hop, (b"connection", b"close")]
    return Spec(
        method=draw(
            st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"HEAD"])
        ),
        target=draw(TARGETS),
        version=b"1.1" if quirk == "no-host" else draw(st.sampled_from([b"1.1", b"1.1", b"1.0"])),
        headers=[
            (b"x-" + name.encode(), value)
            for name, value in draw(st.lists(st.tuples(NAMES, VALUES), max_size=4))
        ],
        hop=hop,
        host=draw(st.sampled_from([b"tap", b"vllm.example:8000"])),
        body=body,
        framing=framing,
        chunks=draw(chunkings(body)) if framing == "chunked" else [],
        expect=framing == "length" and draw(st.booleans()),
        quirk=quirk,
    )


def render(spec: Spec) -> bytes:
    """The raw request, with its quirk applied."""
    quirk = spec.quirk
    method = {"lowercase-method": spec.method.lower(), "unknown-method": b"FROB"}.get(
        quirk or "", spec.method
    )
    target = b"/\xc3\xa9" if quirk == "non-ascii-target" else spec.target
    version = b"2.0" if quirk == "http2-version" else spec.version
    line = method + b" " + target + (b"" if quirk == "http09" else b" HTTP/" + version)
    lines = [line, *head_lines(spec)]
    end = b"\n" if quirk == "bare-lf-head" else b"\r\n"
    head = end.join([*lines, b"", b""])
    raw = head + body_bytes(spec)
    return b"\r\n" + raw if quirk == "leading-crlf" else raw


def head_lines(spec: Spec) -> list[bytes]:
    quirk, lines = spec.quirk, []
    if spec.host is not None and quirk != "no-host":
        lines.append(b"host: " + spec.host)
    if quirk == "two-hosts":
        lines.append(b"host: other")
    lines += [name + b": " + value for name, value in spec.headers + spec.hop]
    lines += {
        "obs-fold": [b"x-fold: a", b" b"],
        "control-in-value": [b"x-c: a\x01b"],
        "del-in-value": [b"x-c: a\x7fb"],
        "space-before-colon": [b"x-s : b"],
    }.get(quirk or "", [])
    if spec.expect:
        lines.append(b"expect: 100-continue")
    return lines + framing_lines(spec)


def framing_lines(spec: Spec) -> list[bytes]:
    length = b"%d" % len(spec.body)
    if spec.framing == "length":
        return {
            "dup-content-length": [b"content-length: " + length] * 2,
            "content-length-list": [b"content-length: " + length + b", " + length],
            "bad-content-length": [b"content-length: +" + length],
        }.get(spec.quirk or "", [b"content-length: " + length])
    if spec.framing == "chunked":
        coding = b"gzip, chunked" if spec.quirk == "gzip-chunked" else b"chunked"
        lines = [b"transfer-encoding: " + coding]
        return (
            [b"content-length: " + length, *lines] if spec.quirk == "length-and-chunked" else lines
        )
    return []


def body_bytes(spec: Spec) -> bytes:
    if spec.framing != "chunked":
        return spec.body
    quirk, out = spec.quirk, []
    for index, (data, extension) in enumerate(spec.chunks):
        size, ext, after = chunk_quirk(quirk if index == 0 else None, b"%x" % len(data), extension)
        out.append(size + ext + b"\r\n" + data + after)
    out.append(b"0\r\n\r\n")
    raw = b"".join(out)
    return raw.replace(b"\r\n", b"\n") if quirk == "bare-lf-chunked" else raw


def chunk_quirk(quirk: str | None, size: bytes, extension: bytes) -> tuple[bytes, bytes, bytes]:
    """The first chunk's size, extension and data ending, as the quirk bends them."""
    if quirk == "chunk-size-space":
        return size + b" ", b"", b"\r\n"
    if quirk == "bare-extension":
        return size, b";", b"\r\n"
    if quirk == "extension-trailing-space":
        return size, b";a=b ", b"\r\n"
    if quirk == "crlf-in-quoted-extension":
        return size, b';a="x\r\ny"', b"\r\n"
    if quirk == "chunk-size-overflow":
        return b"fffffffffffffffff" + size, extension, b"\r\n"
    if quirk == "0x-chunk-size":
        return b"0x" + size, extension, b"\r\n"
    if quirk == "no-crlf-after-data":
        return size, extension, b"XX"
    if quirk == "long-chunk-size":
        return b"0" * 21 + size, extension, b"\r\n"
    return size, extension, b"\r\n"


@dataclass
class Verdict:
    name: str
    """accept, reject, or need (h11 only: it waits for more bytes)."""
    request: Forwarded | None = None


def h11_verdict(spec: Spec) -> Verdict:
    """What h11, as a server, makes of the request at the start of a connection (sent one at a
    time, every request of a sequence starts where the previous exchange left a clean state)."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(spec.raw)
    return h11_one(connection)


def h11_one(connection: h11.Connection) -> Verdict:
    request: Forwarded | None = None
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                return Verdict("need")
            if isinstance(event, h11.Request):
                request = Forwarded(event.method, event.target, list(event.headers.raw_items()))
            elif isinstance(event, h11.Data) and request is not None:
                request.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Verdict("accept", request)
    except h11.RemoteProtocolError:
        return Verdict("reject")


def expected_verdict(spec: Spec, h11_verdict: str) -> str:
    """The tap's verdict: h11's, or the documented difference for the request's quirk."""
    if spec.quirk is None:
        assert h11_verdict != "need", spec.raw
        return h11_verdict
    h11_seen, tap, _why = QUIRKS[spec.quirk]
    assert h11_verdict in h11_seen, (spec.quirk, h11_verdict)  # the table is still true
    return tap


@dataclass
class Observed:
    reply: Reply | None
    forwarded: list[Forwarded]
    raw_bytes: int
    rest: bytes = b""


async def send_one(
    harness: Harness,
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    spec: Spec,
    cuts: list[int],
) -> Observed:
    reader, writer = stream
    upstream = harness.upstream
    forwarded, raw = len(upstream.forwarded), upstream.raw_bytes
    for start, end in zip([0, *cuts], [*cuts, len(spec.raw)], strict=True):
        writer.write(spec.raw[start:end])
        await writer.drain()  # never a reset: the tap half-closes and drains (lingering close)
        await asyncio.sleep(0)
    reply = await read_reply(reader, spec.raw.lstrip(b"\r\n").split(b" ", 1)[0])
    if reply is None or reply.status >= 400:
        await asyncio.sleep(0.01)  # anything the tap had sent upstream has arrived by now
    return Observed(reply, upstream.forwarded[forwarded:], upstream.raw_bytes - raw)


async def run_sequence(
    harness: Harness, tap: str, requests: list[Spec], *, pipelined: bool, cuts: list[int]
) -> list[Observed]:
    address = harness.taps[tap].address
    reader, writer = await asyncio.open_connection(*address)
    observed: list[Observed] = []
    try:
        if pipelined:
            whole = Spec(**{**requests[0].__dict__, "raw": b"".join(s.raw for s in requests)})
            observed.append(await send_one(harness, (reader, writer), whole, cuts))
            observed[-1].rest = await reader.read()
            return observed
        for spec in requests:
            observed.append(await send_one(harness, (reader, writer), spec, []))
            reply = observed[-1].reply
            if reply is None or reply.status >= 400 or not spec.keep_alive:
                break
    finally:
        writer.close()
    return observed


def check_accepted(spec: Spec, seen: Observed, reference: Forwarded | None) -> None:
    assert seen.reply is not None and seen.reply.status == 200, spec.raw
    assert seen.reply.body == (b"" if spec.method == b"HEAD" else b"ok")
    assert len(seen.forwarded) == 1, spec.raw
    sent = seen.forwarded[0]
    assert (sent.method, sent.target, bytes(sent.body)) == (spec.method, spec.target, spec.body)
    if reference is not None:  # h11 read the client's bytes as the same message
        assert (reference.method, reference.target, bytes(reference.body)) == (
            spec.method,
            spec.target,
            spec.body,
        )
    framing = {b"host", b"content-length", b"transfer-encoding"}
    kept = [(name.lower(), value) for name, value in sent.headers if name.lower() not in framing]
    assert kept == [(name, value) for name, value in spec.headers], spec.raw
    hosts = [value for name, value in sent.headers if name.lower() == b"host"]
    assert len(hosts) == 1 and (spec.quirk == "no-host" or hosts[0] == spec.host)


def check_rejected(spec: Spec, seen: Observed) -> None:
    assert seen.reply is None or seen.reply.status in (400, 501, 505), spec.raw
    assert seen.forwarded == [] and seen.raw_bytes == 0, spec.raw  # nothing of it went upstream


@SETTINGS
@given(
    requests=st.lists(specs(), min_size=1, max_size=3),
    pipelined=st.booleans(),
    tap=st.sampled_from(["default", "small"]),
    data=st.data(),
)
def test_request_framing_agrees_with_h11(
    harness: Harness, *, requests: list[Spec], pipelined: bool, tap: str, data: st.DataObject
) -> None:
    for spec in requests:
        spec.raw = render(spec)
    total = sum(len(spec.raw) for spec in requests)
    cuts = sorted(data.draw(st.lists(st.integers(1, max(1, total - 1)), max_size=3)))
    pipelined = pipelined and len(requests) > 1  # a lone request is just a request
    harness.upstream.responder = ok_answer
    sequence = run_sequence(harness, tap, requests, pipelined=pipelined, cuts=cuts)
    observed = harness.run(sequence, timeout=5)
    steps = 0
    for spec, seen in zip(requests, observed, strict=False):
        verdict = h11_verdict(spec)
        steps += 1
        if expected_verdict(spec, verdict.name) == "reject":
            check_rejected(spec, seen)
            break
        check_accepted(spec, seen, verdict.request)
        if not spec.keep_alive:
            break
    assert len(observed) == steps
    if pipelined:
        assert observed[0].rest == b""  # the tap closed after the first; nothing else answered
        assert len(observed[0].forwarded) <= 1
    assert harness.upstream.errors == []


# (a) bodies byte for byte


@dataclass
class Upload:
    method: bytes
    target: bytes
    version: bytes
    body: bytes
    chunks: list[tuple[bytes, bytes]] | None

    def raw(self) -> bytes:
        head = [
            self.method + b" " + self.target + b" HTTP/" + self.version,
            b"host: tap",
            b"content-type: application/json",
        ]
        if self.chunks is None:
            head.append(b"content-length: %d" % len(self.body))
            body = self.body
        else:
            head.append(b"transfer-encoding: chunked")
            body = (
                b"".join(b"%x%b\r\n%b\r\n" % (len(d), e, d) for d, e in self.chunks) + b"0\r\n\r\n"
            )
        return b"\r\n".join([*head, b"", b""]) + body


@st.composite
def responses(draw: st.DrawFn, body: bytes, content_type: bytes) -> tuple[Answer, bytes]:
    """An upstream response with this body, in random framing and pieces; and its raw body."""
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    status = draw(st.sampled_from([200, 201, 400, 404, 500, 503]))
    head = b"HTTP/1.1 %d X\r\ncontent-type: %b\r\n" % (status, content_type)
    if framing == "length":
        head, wire = head + b"content-length: %d\r\n\r\n" % len(body), body
    elif framing == "chunked":
        chunks = draw(chunkings(body))
        head += b"transfer-encoding: chunked\r\n\r\n"
        wire = b"".join(b"%x%b\r\n%b\r\n" % (len(d), e, d) for d, e in chunks) + b"0\r\n\r\n"
    else:
        head, wire = head + b"connection: close\r\n\r\n", body
    everything = head + wire
    cuts = sorted(draw(st.lists(st.integers(1, len(everything)), max_size=3)))
    pieces = [everything[a:b] for a, b in zip([0, *cuts], [*cuts, len(everything)], strict=True)]
    return Answer([piece for piece in pieces if piece], close=framing == "close"), wire


async def upload(
    harness: Harness, tap: str, request: Upload, answer: Answer | Callable[[Forwarded], Answer]
) -> Reply | None:
    harness.upstream.responder = answer if callable(answer) else lambda _: answer
    reader, writer = await asyncio.open_connection(*harness.taps[tap].address)
    try:
        writer.write(request.raw())
        return await read_reply(reader, request.method)
    finally:
        writer.close()


@SETTINGS
@given(
    data=st.data(),
    tap=st.sampled_from(["default", "small"]),
    version=st.sampled_from([b"1.1", b"1.1", b"1.0"]),
    body=st.one_of(st.binary(max_size=2048), st.binary(min_size=600, max_size=5000)),
    response_body=st.binary(max_size=4096),
)
def test_uninspected_bodies_pass_byte_for_byte(
    harness: Harness,
    *,
    data: st.DataObject,
    tap: str,
    version: bytes,
    body: bytes,
    response_body: bytes,
) -> None:
    chunks = data.draw(st.one_of(st.none(), chunkings(body)))
    request = Upload(
        data.draw(st.sampled_from([b"POST", b"PUT", b"PATCH"])),
        data.draw(st.sampled_from([b"/v1/x", b"/upload?a=1", b"/v1/models"])),
        version,
        body,
        chunks,
    )
    answer, wire = data.draw(responses(response_body, b"application/octet-stream"))
    forwarded = len(harness.upstream.forwarded)
    reply = harness.run(upload(harness, tap, request, answer), timeout=5)
    sent = harness.upstream.forwarded[forwarded:]
    assert len(sent) == 1 and bytes(sent[0].body) == body
    assert reply is not None and reply.body == response_body
    if version == b"1.1":
        assert reply.wire_body == wire  # verbatim, upstream's own framing included
    assert harness.upstream.errors == []


ABSENT = object()
INSERTIONS = (
    b'"stream_options":{"include_usage":true},',
    b'"include_usage":true',
    b',"include_usage":true',
    b',"stream_options":{"include_usage":true}',
)
FINGERPRINT = b'"system_fingerprint":"fp_7"'


@st.composite
def chat_bodies(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """A chat request as a client might write it: any key order, spacing and escaping."""
    document: dict[str, Any] = {
        "model": draw(st.sampled_from(["tiny-llama", "other"])),
        "messages": draw(
            st.lists(
                st.fixed_dictionaries(
                    {"role": st.sampled_from(["user", "system"]), "content": st.text(max_size=40)}
                ),
                max_size=3,
            )
        ),
    }
    optional = {
        "temperature": st.floats(0, 2),
        "stream": st.sampled_from([True, True, False]),
        "stream_options": st.sampled_from(
            [
                None,
                {},
                {"include_usage": False},
                {"include_usage": True},
                {"continuous_usage_stats": True},
                {"continuous_usage_stats": False, "x": [1, "}"]},
            ]
        ),
        "n": st.sampled_from([1, 2]),
    }
    for key, values in optional.items():
        if draw(st.booleans()):
            document[key] = draw(values)
    order = draw(st.permutations(sorted(document)))
    document = {key: document[key] for key in order}
    text = json.dumps(
        document,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 1, "\t"])),
        separators=draw(st.sampled_from([None, (",", ":"), (" , ", " : ")])),
    )
    space = draw(st.sampled_from(["", " ", "\n"]))
    return document, (space + text + space).encode()


def wants_rewrite(document: dict[str, Any]) -> bool:
    """Independently of request.py: a single-choice stream whose client did not ask for usage."""
    options = document.get("stream_options")
    if document.get("stream") is not True or document.get("n", 1) != 1:
        return False
    return options is None or (
        options.get("include_usage") is not True and not options.get("continuous_usage_stats")
    )


def inserted(client: bytes, sent: bytes) -> bytes | None:
    """The one snippet the tap inserted into the body, or None; anything else fails."""
    if sent == client:
        return None
    for snippet in INSERTIONS:
        if len(sent) != len(client) + len(snippet):
            continue
        for at in range(len(client) + 1):
            if (
                sent[:at] == client[:at]
                and sent[at : at + len(snippet)] == snippet
                and sent[at + len(snippet) :] == client[at:]
            ):
                return snippet
    raise AssertionError(f"not a single allowed insertion: {client!r} -> {sent!r}")


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[list[bytes], bytes]:
    """vLLM-shaped events (content, finish, [DONE]) and the usage event it adds on request."""
    texts = draw(st.lists(st.text(max_size=30), max_size=5))
    events = [
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":%b},'
        b'"finish_reason":null}]}\n\n' % json.dumps(text).encode()
        for text in texts
    ]
    events.append(b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    usage = (
        b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d,'
        b'"total_tokens":%d},%b}\n\n' % (len(texts), len(texts) + 3, FINGERPRINT)
    )
    return [*events, b"data: [DONE]\n\n"], usage


def vllm_like(events: list[bytes], usage: bytes, json_body: bytes) -> Callable[[Forwarded], Answer]:
    def answer(request: Forwarded) -> Answer:
        document = json.loads(bytes(request.body))
        if document.get("stream") is not True:
            return Answer(
                [
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%b" % (len(json_body), json_body)
                ]
            )
        with_usage = (document.get("stream_options") or {}).get("include_usage") is True
        stream = [*events[:-1], usage, events[-1]] if with_usage else events
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        chunks = [b"%x\r\n%b\r\n" % (len(event), event) for event in stream]
        return Answer([head + chunks[0], *chunks[1:], b"0\r\n\r\n"])

    return answer


def undone(events: list[bytes]) -> bytes:
    """What the client of a rewritten stream gets: no usage event, the fingerprint back on the
    finish chunk (as vLLM writes it without include_usage)."""
    finish = events[-2]
    return b"".join(events[:-2]) + finish[:-3] + b"," + FINGERPRINT + b"}\n\n" + events[-1]


@SETTINGS
@given(
    data=st.data(),
    tap=st.sampled_from(["default", "small"]),
    chat=chat_bodies(),
    stream=sse_streams(),
    json_body=st.binary(max_size=2048),
    target=st.sampled_from(
        [b"/v1/chat/completions", b"/v1/completions", b"http://vllm/v1/chat/%63ompletions?x=1"]
    ),
)
def test_inspected_bodies_pass_byte_for_byte_but_for_the_usage_rewrite(
    harness: Harness,
    *,
    data: st.DataObject,
    tap: str,
    chat: tuple[dict[str, Any], bytes],
    stream: tuple[list[bytes], bytes],
    json_body: bytes,
    target: bytes,
) -> None:
    document, body = chat
    chunks = data.draw(st.one_of(st.none(), chunkings(body)))
    events, usage = stream
    stats = harness.taps[tap].stats
    counted = sum(row.requests for row in stats.bucket_summary())
    forwarded = len(harness.upstream.forwarded)
    request = Upload(b"POST", target, b"1.1", body, chunks)
    reply = harness.run(
        upload(harness, tap, request, vllm_like(events, usage, json_body)), timeout=5
    )
    sent = bytes(harness.upstream.forwarded[forwarded].body)
    snippet = inserted(body, sent)
    assert (snippet is not None) == (
        wants_rewrite(document) and len(body) <= SMALL_CAP
        if tap == "small"
        else wants_rewrite(document)
    )
    if snippet is not None:
        options = document.get("stream_options") or {}
        assert json.loads(sent) == {
            **document,
            "stream_options": {**options, "include_usage": True},
        }
    assert reply is not None and reply.status == 200
    if document.get("stream") is not True:
        assert reply.wire_body == json_body
    elif snippet is not None:
        assert reply.body == undone(events)  # the only change: the usage chunk, re-framed
    else:
        with_usage = (document.get("stream_options") or {}).get("include_usage") is True
        sent_events = [*events[:-1], usage, events[-1]] if with_usage else events
        assert (
            reply.wire_body
            == b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in sent_events) + b"0\r\n\r\n"
        )  # verbatim, chunk framing included
    assert sum(row.requests for row in stats.bucket_summary()) == counted + 1
    assert harness.upstream.errors == []

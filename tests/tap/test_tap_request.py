"""What the tap reads from a request body and how it asks vLLM for usage."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.tap.jsonscan import loads, object_members
from specdec_exporter.tap.request import model_label, plan_request, uninspected_plan

BUCKETS = TemperatureBuckets()


def plan(document: object, default: float | None = None, raw: bytes | None = None):  # type: ignore[no-untyped-def]
    body = raw if raw is not None else json.dumps(document).encode()
    return plan_request(body, BUCKETS, default)


def test_non_streaming_body_passes_unchanged() -> None:
    body = b'{"model": "m", "temperature": 0.8, "messages": []}'
    result = plan(None, raw=body)
    assert (result.model, result.temperature_bucket, result.body) == ("m", "0.7-1.0", body)
    assert not result.undo_include_usage


def test_missing_temperature_uses_default_then_one() -> None:
    assert plan({"model": "m"}, default=0.6).temperature_bucket == "0.5-0.7"
    assert plan({"model": "m"}).temperature_bucket == "0.7-1.0"
    assert plan({"model": "m", "temperature": None}, default=0.0).temperature_bucket == "0"


def test_stream_without_stream_options_gets_include_usage_inserted_first() -> None:
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    result = plan(None, raw=body)
    assert result.undo_include_usage
    assert result.body == (
        b'{"stream_options":{"include_usage":true},"model":"m","stream":true,'
        b'"messages":[{"role":"user","content":"hi"}]}'
    )


def test_leading_whitespace_kept() -> None:
    result = plan(None, raw=b'  \n{"stream": true}')
    assert result.body == b'  \n{"stream_options":{"include_usage":true},"stream": true}'
    assert json.loads(result.body)["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("options", [None, {}, {"include_usage": False}])
def test_stream_options_without_usage_rewritten(options: object) -> None:
    result = plan({"model": "m", "stream": True, "stream_options": options, "x": "é"})
    assert result.undo_include_usage
    document = json.loads(result.body)
    assert document["stream_options"]["include_usage"] is True
    assert document["x"] == "é" and document["model"] == "m"


@pytest.mark.parametrize(
    "document",
    [
        {"stream": True, "stream_options": {"include_usage": True}},  # client asked: untouched
        {"stream": False},
        {"stream": "true"},  # not a JSON bool: left to vLLM
        {"stream": True, "n": 2},  # vLLM sends no per-request metrics for n > 1
        {"stream": True, "stream_options": {"continuous_usage_stats": True}},
        {"stream": True, "stream_options": "yes"},
    ],
)
def test_not_rewritten(document: dict[str, object]) -> None:
    body = json.dumps(document).encode()
    result = plan(None, raw=body)
    assert not result.undo_include_usage
    assert result.body == body


@pytest.mark.parametrize(
    ("raw", "bucket"),
    [
        (b"not json", "invalid"),
        (b"[1, 2]", "invalid"),
        (b'{"temperature": "0.5"}', "invalid"),
        (b'{"temperature": NaN}', "invalid"),
        (b'{"temperature": -0.5}', "invalid"),
        (b'{"temperature": Infinity}', "invalid"),
        (b'{"temperature": 1e999}', "invalid"),
        (b'{"temperature": true}', "invalid"),
        (b'{"temperature": 1e300}', "1.0+"),
        (b"\xff\xfe", "invalid"),
        (b"[" * 100_000, "invalid"),  # deep nesting must not raise
    ],
)
def test_hostile_bodies_never_raise(raw: bytes, bucket: str) -> None:
    result = plan(None, raw=raw)
    assert result.temperature_bucket == bucket
    assert result.body == raw


def test_model_must_be_a_string() -> None:
    assert plan({"model": ["m"]}).model is None


def test_model_label_is_bounded() -> None:
    served = frozenset({"tiny-llama"})
    assert model_label("tiny-llama", served) == "tiny-llama"
    assert model_label("x" * 10_000, served) == "other"
    assert model_label(None, served) == "tiny-llama"  # vLLM serves its only model
    assert model_label(None, frozenset({"a", "b"})) == "other"
    assert model_label("a", frozenset()) == "other"


def test_uninspected_plan() -> None:
    result = uninspected_plan(b"{}")
    assert (result.model, result.temperature_bucket, result.undo_include_usage) == (
        None,
        "unknown",
        False,
    )


def test_object_members_finds_top_level_values_byte_exactly() -> None:
    body = b' {"a" : "}\\"{" , "b\\u0062":[{"c":"]"}], "a":null,"d":-1.5e3 }'
    members = object_members(body)
    assert members is not None
    assert [(m.key, body[m.start : m.end]) for m in members] == [
        ("a", b'"}\\"{"'),
        ("bb", b'[{"c":"]"}]'),
        ("a", b"null"),
        ("d", b"-1.5e3"),
    ]
    assert object_members(b"[1]") is None and object_members(b'{"a":"open') is None


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',
        ' \t\r\n{"a": [1, 2.5, "x\\u00e9"]} \n',
        "[]",
        "3",
        '"s"',
        "",
        "   ",
        '{"a": 1} x',
        '{"a": 1}{"b": 2}',
        '\ufeff{"a": 1}',
        '{"a": NaN, "b": Infinity}',
        '{"a": 1,}',
        "\u00a0{}",
        '{"a": 1}\u00a0',
    ],
)
def test_loads_accepts_and_rejects_what_json_loads_does(text: str) -> None:
    try:
        expected: object = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            loads(text)
        return
    assert loads(text) == expected


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=' \t\n\r{}[]:,"\\0123456789.eE+-aeflnrstu\u00e9\ufeff', max_size=40))
def test_loads_agrees_with_json_loads_on_any_text(text: str) -> None:
    try:
        expected: object = json.loads(text)
    except (ValueError, RecursionError):
        with pytest.raises((ValueError, RecursionError)):
            loads(text)
        return
    assert loads(text) == expected


def test_include_usage_insertion_keeps_every_other_byte() -> None:
    body = b'{"stream": true, "stream_options": {"continuous_usage_stats": false}, "x": "\\u00e9"}'
    result = plan(None, raw=body)
    assert result.undo_include_usage
    assert result.body == body.replace(b"false}", b'false,"include_usage":true}')

"""Shapes of what a vLLM server sends, to compare two servers: family tables, JSON and SSE shapes.

Pure functions over text and parsed JSON; `readable_diff` turns two shapes into a unified diff.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specdec_exporter.devtools.load.sse import SseDecoder

Shape = Any
"""A JSON-like value whose leaves are type names ("str", "int", "null", ...)."""

LITERAL_KEYS = frozenset({"object", "role"})
"""Keys whose value is a discriminator, kept literally in a shape instead of its type."""

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+\S+")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"(?:[^"\\]|\\.)*"')
_FAMILY_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_info", "_gcount", "_gsum")


@dataclass(frozen=True)
class Family:
    """One metric family as exposed: its type, HELP text and the label names of its samples."""

    type: str
    help: str
    labels: tuple[str, ...]


def family_table(text: str, prefix: str = "vllm:") -> dict[str, Family]:
    """The metric families of an exposition whose names start with `prefix`, by TYPE-line name.

    Label names are the union over the family's samples (a histogram's `le` included).
    """
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith(("# TYPE ", "# HELP ")):
            _, kind, name, *rest = line.split(" ", 3)
            (types if kind == "TYPE" else helps)[name] = rest[0] if rest else ""
            labels.setdefault(name, set())
        elif line and not line.startswith("#") and (match := _SAMPLE.match(line)):
            family = _family_of(match["name"], labels)
            labels.setdefault(family, set()).update(_LABEL.findall(match["labels"] or ""))
    return {
        name: Family(types.get(name, "untyped"), helps.get(name, ""), tuple(sorted(names)))
        for name, names in labels.items()
        if name.startswith(prefix) or name.replace("_", ":", 1).startswith(prefix)
    }


def _family_of(sample_name: str, known: dict[str, set[str]]) -> str:
    if sample_name in known:
        return sample_name
    for suffix in _FAMILY_SUFFIXES:
        base = sample_name.removesuffix(suffix)
        if base != sample_name and base in known:
            return base
    return sample_name


def render_family_table(table: dict[str, Family]) -> list[str]:
    """One line per family, sorted: `name  type  [labels]  help`."""
    return [
        f"{name}  {family.type}  [{','.join(family.labels)}]  {family.help}"
        for name, family in sorted(table.items())
    ]


def json_shape(value: Any) -> Shape:
    """Replace every leaf by its type name; keep objects' keys, lists of objects item by item.

    A list of scalars becomes "list[type]" (its length varies with the text); values of the keys
    in LITERAL_KEYS stay literal, so a chunk and a completion do not look alike.
    """
    if isinstance(value, dict):
        return {key: _keyed_shape(key, item) for key, item in value.items()}
    if isinstance(value, list):
        if value and all(not isinstance(item, dict | list) for item in value):
            return "list[" + "|".join(sorted({_scalar_type(item) for item in value})) + "]"
        return [json_shape(item) for item in value]
    return _scalar_type(value)


def _keyed_shape(key: str, value: Any) -> Shape:
    if key in LITERAL_KEYS and isinstance(value, str):
        return f"={value}"
    return json_shape(value)


def _scalar_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), "?")


def sse_events(raw: bytes) -> list[str]:
    """The `data:` payloads of an SSE body, in order (comments and other fields dropped)."""
    decoder = SseDecoder()
    return [event.decode() for event in (*decoder.feed(raw), *decoder.close())]


def stream_shape(raw: bytes) -> list[str]:
    """The chunk shapes of an SSE body: each choice's chunks in order, then the other events.

    A line per chunk shape (compact JSON), runs of equal lines collapsed: how many content chunks
    a completion takes depends on the text, and how the chunks of `n > 1` choices interleave on
    timing, neither on the protocol. Chunks without a choice (usage) and `[DONE]` come last, in
    order; a choice chunk arriving after one of them is flagged.
    """
    per_choice: dict[int, list[str]] = {}
    closing: list[str] = []
    for payload in sse_events(raw):
        index, line = _choice_and_shape(payload)
        if index is None:
            closing.append(line)
            continue
        if closing:
            closing.append(f"choice {index} chunk after the closing events: {line}")
        lines = per_choice.setdefault(index, [])
        if not lines or lines[-1] != line:
            lines.append(line)
    ordered = [
        f"choice {index}: {line}" for index in sorted(per_choice) for line in per_choice[index]
    ]
    return ordered + closing


def _choice_and_shape(payload: str) -> tuple[int | None, str]:
    if payload == "[DONE]":
        return None, payload
    chunk = json.loads(payload)
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    index = choices[0].get("index") if isinstance(choices, list) and len(choices) == 1 else None
    return (index if isinstance(index, int) else None), _compact(json_shape(chunk))


def _compact(shape: Shape) -> str:
    return json.dumps(shape, sort_keys=True, separators=(",", ":"))


def shape_lines(shape: Shape) -> list[str]:
    """A shape as sorted, indented JSON lines (what `readable_diff` compares)."""
    if isinstance(shape, list) and all(isinstance(item, str) for item in shape):
        return list(shape)
    return json.dumps(shape, sort_keys=True, indent=2).splitlines()


def readable_diff(
    expected: Sequence[str] | Shape,
    actual: Sequence[str] | Shape,
    expected_name: str = "expected",
    actual_name: str = "actual",
) -> str:
    """A unified diff of two shapes or line lists; empty when they are equal."""
    diff: Iterable[str] = difflib.unified_diff(
        shape_lines(expected),
        shape_lines(actual),
        fromfile=expected_name,
        tofile=actual_name,
        lineterm="",
        n=2,
    )
    return "\n".join(diff)

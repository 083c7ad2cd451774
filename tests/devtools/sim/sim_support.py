"""Helpers of the simulator tests: read exposition text and JSON shapes structurally."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec_exporter.devtools.load.sse import SseDecoder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
V033 = FIXTURES / "vllm-0.33.0"
V073 = FIXTURES / "vllm-0.7.3"
CPU032 = FIXTURES / "vllm-0.32.0-cpu"
NGRAM_K4 = '{"method": "ngram", "num_speculative_tokens": 4}'

SAMPLE = re.compile(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class FamilyInfo:
    """What a family looks like, values aside."""

    type: str
    help: str
    samples: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    edges: list[str] = field(default_factory=list)


def parse_sample(line: str) -> tuple[str, list[tuple[str, str]], float]:
    match = SAMPLE.match(line)
    assert match is not None, line
    return match.group(1), LABEL.findall(match.group(2) or ""), float(match.group(3))


def families(text: str) -> dict[str, FamilyInfo]:
    """Family name (as in # TYPE) -> type, HELP, the label names of each sample, le edges."""
    table: dict[str, FamilyInfo] = {}
    helps: dict[str, str] = {}
    current: FamilyInfo | None = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            current = table[name] = FamilyInfo(type=kind, help=helps[name])
        elif line and current is not None:
            name, labels, _ = parse_sample(line)
            current.samples.append((name, tuple(key for key, _ in labels)))
            for key, value in labels:
                if key == "le" and value not in current.edges:
                    current.edges.append(value)
    return table


def structure(text: str) -> list[str]:
    """Every line with its value removed (and python_info's version labels)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("python_info"):
            lines.append("python_info")
        elif line.startswith("#"):
            lines.append(line)
        else:
            lines.append(line.rsplit(" ", 1)[0])
    return lines


def sample_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (e.g. all engines)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            sample, found, value = parse_sample(line)
            if sample == name and all((k, v) in found for k, v in labels.items()):
                total += value
    return total


def shape(value: Any) -> Any:
    """JSON structure: objects as (key, shape) lists in order, lists element-wise, else type."""
    if isinstance(value, dict):
        return [(key, shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [shape(item) for item in value]
    if value is None:
        return "null"
    return type(value).__name__


def key_paths(value: Any, prefix: str = "") -> list[str]:
    """Every object key with its path, in document order (list elements share index 0's path)."""
    paths: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            paths.append(f"{prefix}.{key}")
            paths.extend(key_paths(item, f"{prefix}.{key}"))
    elif isinstance(value, list) and value:
        paths.extend(key_paths(value[0], f"{prefix}[]"))
    return paths


def sse_payloads(raw: bytes) -> list[str]:
    """The data of each SSE event, in order; the framing must be vLLM's exactly: one
    ``data: <payload>`` line per event, each followed by a blank line, nothing else."""
    decoder = SseDecoder()
    payloads = decoder.feed(raw)
    assert decoder.close() == [], "a stream ends with a blank line"
    assert raw == b"".join(b"data: " + payload + b"\n\n" for payload in payloads), raw[:200]
    return [payload.decode() for payload in payloads]


def chunk_kind(chunk: dict[str, Any]) -> str:
    """role / content / finish / usage: the kinds of chunk a vLLM chat stream sends."""
    if not chunk["choices"]:
        return "usage"
    choice = chunk["choices"][0]
    if "role" in choice.get("delta", {}):
        return "role"
    return "finish" if choice["finish_reason"] is not None else "content"


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def total_of(values: Iterable[int]) -> int:
    return sum(values)

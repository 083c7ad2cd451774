"""What the tap does with one inspected request body: its labels, and whether to ask for usage.

Pure: bytes in, a ``RequestPlan`` out. Never raises on hostile input (fail open).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any, NamedTuple

from specdec_exporter.core.buckets import (
    INVALID_LABEL,
    UNKNOWN_LABEL,
    TemperatureBuckets,
    effective_temperature,
)
from specdec_exporter.tap.jsonscan import loads, object_members

OTHER_MODEL = "other"
"""``model_name`` of requests naming a model the vLLM server does not serve (bounded labels)."""

INCLUDE_USAGE_MEMBER = b'"stream_options":{"include_usage":true},'
UTF8_BOM = b"\xef\xbb\xbf"


class RequestPlan(NamedTuple):
    """The labels of a request, and the body to send upstream (one per request: a NamedTuple,
    cheaper to build than a frozen dataclass)."""

    model: str | None
    temperature_bucket: str
    body: bytes
    undo_include_usage: bool = False
    """The tap added ``include_usage`` and must remove its traces from the stream."""


def model_label(model: str | None, served: Collection[str]) -> str:
    """The ``model_name`` label: a served name, or ``other``; an absent model is the only one."""
    if model is None:
        return next(iter(served)) if len(served) == 1 else OTHER_MODEL
    return model if model in served else OTHER_MODEL


def uninspected_plan(body: bytes) -> RequestPlan:
    """A body over the inspection cap: forwarded as it is, temperature never read."""
    return RequestPlan(model=None, temperature_bucket=UNKNOWN_LABEL, body=body)


def plan_request(
    body: bytes, buckets: TemperatureBuckets, default_temperature: float | None
) -> RequestPlan:
    """Read ``model``, ``temperature``, ``n``, ``stream``, ``stream_options`` of a JSON body.

    The body is decoded as vLLM decodes it (``json.loads`` on bytes: UTF-8, UTF-16 or UTF-32,
    with or without a byte order mark), so every body vLLM accepts lands in its real bucket.
    Only UTF-8 is rewritten (after a BOM, if any): the ASCII insertion would corrupt the rest.
    """
    encoding = json.detect_encoding(body)
    document = _json_object(body, encoding)
    if document is None:
        return RequestPlan(model=None, temperature_bucket=INVALID_LABEL, body=body)
    model = document.get("model")
    temperature = effective_temperature(document.get("temperature"), default_temperature)
    bucket = INVALID_LABEL if temperature is None else buckets.label_for(temperature)
    rewritten = None
    if _wants_usage_rewrite(document) and encoding in ("utf-8", "utf-8-sig"):
        bom = UTF8_BOM if body.startswith(UTF8_BOM) else b""
        inserted = _with_include_usage(body[len(bom) :], document)
        rewritten = None if inserted is None else bom + inserted
    return RequestPlan(
        model=model if isinstance(model, str) else None,
        temperature_bucket=bucket,
        body=body if rewritten is None else rewritten,
        undo_include_usage=rewritten is not None,
    )


def _json_object(body: bytes, encoding: str) -> dict[str, Any] | None:
    """``json.loads(body)`` as vLLM's FastAPI app runs it (Starlette's ``Request.json``)."""
    try:
        document = loads(body.decode(encoding, "surrogatepass"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def _wants_usage_rewrite(document: dict[str, Any]) -> bool:
    """A single-choice stream whose client did not ask for usage (so no metrics would come).

    Not rewritten: ``n > 1`` and a list of prompts (vLLM sends no per-request metrics for
    either) and ``continuous_usage_stats`` (turning ``include_usage`` on would add usage to
    every chunk).
    """
    if document.get("stream") is not True or document.get("n") not in (None, 1):
        return False
    if _several_prompts(document.get("prompt")):
        return False
    options = document.get("stream_options")
    if options is None:
        return True
    if not isinstance(options, dict) or options.get("include_usage") is True:
        return False
    return not options.get("continuous_usage_stats")


def _several_prompts(prompt: Any) -> bool:
    """A ``/v1/completions`` prompt of more than one prompt: a list of strings or of token-id
    lists (a list of ints is one prompt's token ids)."""
    return isinstance(prompt, list) and len(prompt) > 1 and not isinstance(prompt[0], int)


def _with_include_usage(body: bytes, document: dict[str, Any]) -> bytes | None:
    """The body with ``stream_options.include_usage`` on: the original bytes plus one insertion.

    ``json.loads`` (what vLLM's FastAPI app parses bodies with) keeps the last of duplicate
    keys, so the member is added after whatever the client wrote: before the closing brace of
    the last top-level ``stream_options`` object, or after a ``"stream_options": null``.
    None (the body goes as it is, not rewritten) where that cannot be done safely.
    """
    if "stream_options" not in document:
        opening = body.find(b"{")
        return body[: opening + 1] + INCLUDE_USAGE_MEMBER + body[opening + 1 :]
    members = object_members(body)
    options = [member for member in members or () if member.key == "stream_options"]
    if not options:
        return None
    value = options[-1]
    if body[value.start : value.end] == b"null":
        return body[: value.end] + b',"stream_options":{"include_usage":true}' + body[value.end :]
    if body[value.start : value.start + 1] != b"{" or body[value.end - 1 : value.end] != b"}":
        return None
    close = value.end - 1
    empty = not body[value.start + 1 : close].strip()
    member = b'"include_usage":true' if empty else b',"include_usage":true'
    return body[:close] + member + body[close:]

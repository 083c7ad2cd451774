"""OpenAI response bodies and SSE chunks with vLLM's exact keys, key order and null keys."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specdec_exporter.devtools.sim.engine import EngineRequest, RequestSpecCounts

DONE = b"data: [DONE]\n\n"


def dumps(value: Any) -> str:
    """Compact JSON, UTF-8 kept as is (pydantic's model_dump_json)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse(value: Any) -> bytes:
    return f"data: {dumps(value)}\n\n".encode()


@dataclass(frozen=True)
class ChoiceResult:
    index: int
    text: str
    finish_reason: str | None
    tokens: int


def usage(prompt_tokens: int, completion_tokens: int, *, details: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if details:
        body["prompt_tokens_details"] = None
        body["completion_tokens_details"] = None
    return body


def spec_decoding(stats: RequestSpecCounts) -> dict[str, Any]:
    """metrics.speculative_decoding as vLLM >= 0.29 fills it for one request."""
    steps, drafted, accepted = stats.num_spec_steps, stats.num_draft_tokens, stats.num_accepted
    return {
        "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": list(stats.histogram),
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": stats.k_max,
        "per_step_accepted": list(stats.per_step_accepted) if stats.detailed else None,
        "per_step_drafted": list(stats.per_step_drafted) if stats.detailed else None,
    }


def timing(request: EngineRequest) -> dict[str, float | None]:
    """vLLM's build_per_request_timing_metrics (``--enable-per-request-metrics``)."""
    scheduled, first, last = request.scheduled_at, request.first_token_at, request.finished_at
    tokens = request.generated
    values: dict[str, float | None] = {
        "time_to_first_token_ms": None,
        "generation_time_ms": None,
        "queue_time_ms": None,
        "mean_itl_ms": None,
        "tokens_per_second": None,
    }
    if scheduled is not None and first is not None:
        values["time_to_first_token_ms"] = (first - scheduled) * 1000
    if first is not None and last is not None:
        values["generation_time_ms"] = (last - first) * 1000
        if tokens > 1:
            values["mean_itl_ms"] = (last - first) / (tokens - 1) * 1000
    if scheduled is not None:
        values["queue_time_ms"] = (scheduled - request.arrival) * 1000
        if last is not None and last > scheduled:
            values["tokens_per_second"] = tokens / (last - scheduled)
    return values


def per_request_metrics(
    request: EngineRequest, *, timings: bool, speculative: bool
) -> dict[str, Any] | None:
    """The top-level ``metrics`` object for a single-sequence request, or None."""
    if not timings and not speculative:
        return None
    body: dict[str, Any] = (
        timing(request)
        if timings
        else dict.fromkeys(
            (
                "time_to_first_token_ms",
                "generation_time_ms",
                "queue_time_ms",
                "mean_itl_ms",
                "tokens_per_second",
            )
        )
    )
    body["speculative_decoding"] = spec_decoding(request.stats) if speculative else None
    return body


def drop_nulls(value: Any) -> Any:
    """pydantic's exclude_none, recursively through objects (not inside lists)."""
    if isinstance(value, dict):
        return {key: drop_nulls(item) for key, item in value.items() if item is not None}
    return value


def chat_completion(
    *,
    request_id: str,
    created: int,
    model: str,
    fingerprint: str,
    choices: Sequence[ChoiceResult],
    prompt_tokens: int,
    metrics: dict[str, Any] | None,
) -> dict[str, Any]:
    completion_tokens = sum(choice.tokens for choice in choices)
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": choice.index,
                "message": {
                    "role": "assistant",
                    "content": choice.text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                },
                "logprobs": None,
                "finish_reason": choice.finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
            for choice in choices
        ],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": usage(prompt_tokens, completion_tokens, details=True),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": metrics,
    }


def text_completion(
    *,
    request_id: str,
    created: int,
    model: str,
    fingerprint: str,
    choices: Sequence[ChoiceResult],
    prompt_tokens: int,
    metrics: dict[str, Any] | None,
) -> dict[str, Any]:
    completion_tokens = sum(choice.tokens for choice in choices)
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": choice.index,
                "text": choice.text,
                "logprobs": None,
                "finish_reason": choice.finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
            }
            for choice in choices
        ],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": usage(prompt_tokens, completion_tokens, details=True),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": metrics,
    }


class ChunkWriter:
    """SSE chunks of one streaming response; the constant head of each chunk is built once."""

    def __init__(
        self,
        *,
        chat: bool,
        request_id: str,
        created: int,
        model: str,
        continuous_usage_prompt_tokens: Sequence[int] | None = None,
    ) -> None:
        """``continuous_usage_prompt_tokens``: set with ``stream_options.continuous_usage_stats``,
        when vLLM puts a running ``usage`` on every chunk: the prompt tokens of each choice's own
        prompt, by choice index (vLLM's ``num_prompt_tokens[prompt_idx]``: with a list of
        prompts, each choice's usage counts its prompt alone, not the request's total)."""
        self.chat = chat
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._envelope = {"id": request_id, "object": obj, "created": created, "model": model}
        self._head = "data: " + dumps(self._envelope)[:-1] + ',"choices":['
        self._continuous_prompt = continuous_usage_prompt_tokens

    def _running_usage(self, index: int, completion_tokens: int) -> dict[str, Any] | None:
        """The per-chunk usage of continuous_usage_stats (chat adds a null details key)."""
        if self._continuous_prompt is None:
            return None
        body = usage(self._continuous_prompt[index], completion_tokens, details=False)
        if self.chat:
            body["completion_tokens_details"] = None
        return body

    def role(self, index: int) -> bytes:
        """Chat only: the first chunk of each choice."""
        body: dict[str, Any] = {
            **self._envelope,
            "choices": [
                {
                    "index": index,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
        running = self._running_usage(index, 0)
        if running is not None:
            body["usage"] = running
        return sse({**body, "prompt_token_ids": None, "prompt_text": None})

    def content(
        self,
        index: int,
        text: str,
        completion_tokens: int = 0,
        prompt_token_ids: list[int] | None = None,
    ) -> bytes:
        """``prompt_token_ids``: completions with ``echo``, on each choice's first chunk."""
        if self.chat:
            choice = (
                f'{{"index":{index},"delta":{{"content":{dumps(text)}}},'
                '"logprobs":null,"finish_reason":null,"token_ids":null}'
            )
        else:
            choice = (
                f'{{"index":{index},"text":{dumps(text)},"logprobs":null,'
                '"finish_reason":null,"stop_reason":null,'
                f'"prompt_token_ids":{dumps(prompt_token_ids)},"token_ids":null}}'
            )
        running = self._running_usage(index, completion_tokens)
        tail = "" if running is None else f',"usage":{dumps(running)}'
        return f"{self._head}{choice}]{tail}}}\n\n".encode()

    def finish(
        self,
        index: int,
        text: str,
        reason: str,
        fingerprint: str | None,
        *,
        completion_tokens: int = 0,
        prompt_token_ids: list[int] | None = None,
    ) -> bytes:
        """The chunk carrying finish_reason; the fingerprint rides on it when no usage follows."""
        choice: dict[str, Any]
        if self.chat:
            choice = {
                "index": index,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
                "token_ids": None,
            }
        else:
            choice = {
                "index": index,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
                "prompt_token_ids": prompt_token_ids,
                "token_ids": None,
            }
        body: dict[str, Any] = {**self._envelope, "choices": [choice]}
        running = self._running_usage(index, completion_tokens)
        if running is not None:
            body["usage"] = running
        if fingerprint is not None:
            body["system_fingerprint"] = fingerprint
        return sse(body)

    def usage(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        fingerprint: str,
        metrics: dict[str, Any] | None,
    ) -> bytes:
        body: dict[str, Any] = {
            **self._envelope,
            "choices": [],
            "usage": usage(prompt_tokens, completion_tokens, details=False),
            "system_fingerprint": fingerprint,
        }
        if metrics is not None:
            body["metrics"] = drop_nulls(metrics)
        return sse(body)

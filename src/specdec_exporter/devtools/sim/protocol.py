"""OpenAI request validation as vLLM 0.33 does it, with vLLM's error bodies and status codes."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from specdec_exporter.devtools.sim import text
from specdec_exporter.devtools.sim.settings import SimConfig
from specdec_exporter.devtools.sim.simulation import GenerationSpec

GREEDY_EPSILON = 1e-5
MAX_TEMPERATURE = 2.0
RequestT = TypeVar("RequestT", bound="SamplingRequest")


class VLLMValidationError(ValueError):
    """vLLM's validation error: its text carries the parameter and value."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        base = super().__str__()
        return f"{base} ({', '.join(extras)})" if extras else base


class ApiError(Exception):
    """An error response: HTTP status and vLLM's ``{"error": {...}}`` body."""

    def __init__(self, status: int, message: str, err_type: str, param: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, err_type, status, param)


def error_body(message: str, err_type: str, status: int, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def bad_request(exc: VLLMValidationError) -> ApiError:
    return ApiError(400, str(exc), "BadRequestError", exc.parameter)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class SamplingRequest(BaseModel):
    """Fields both endpoints share; unknown fields are allowed and ignored, as in vLLM."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = None
    n: int | None = 1
    temperature: float | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    seed: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _stream_options_need_stream(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise VLLMValidationError("Stream options can only be defined when `stream=True`.",
                                      parameter="stream_options")
        return data


class ChatRequest(SamplingRequest):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _prompt_required(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("prompt") in (None, "", []):
            raise VLLMValidationError(
                "Either prompt or prompt_embeds must be provided and non-empty.",
                parameter="prompt")
        return data


def parse_request(raw: bytes, model: type[RequestT]) -> RequestT:
    """Decode and validate a body as FastAPI + vLLM would, or raise ApiError 400."""
    if not raw.strip():
        raise validation_failure([{"type": "missing", "loc": ("body",), "msg": "Field required",
                                   "input": None}])
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        position = exc.pos if isinstance(exc, json.JSONDecodeError) else exc.start
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else exc.reason
        raise validation_failure([{"type": "json_invalid", "loc": ("body", position),
                                   "msg": "JSON decode error", "input": {},
                                   "ctx": {"error": reason}}]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])}
                  for error in exc.errors(include_url=False)]
        raise validation_failure(errors) from None


def validation_failure(errors: Sequence[dict[str, Any]]) -> ApiError:
    """vLLM's RequestValidationError handler: 400, type "Bad Request", errors in the message."""
    param = None
    for error in errors:
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, VLLMValidationError):
            param = cause.parameter
            break
    if param is None and errors and errors[0].get("loc"):
        param = ".".join(str(part) for part in errors[0]["loc"])
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n" + "".join(f"  {e}\n" for e in errors)
    return ApiError(400, message.rstrip(), "Bad Request", param)


def check_model(requested: str | None, config: SimConfig) -> None:
    if requested is not None and requested != config.served_model_name:
        raise ApiError(404, f"The model `{requested}` does not exist.", "NotFoundError", "model")


def message_texts(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The text of each chat message (string content or a list of text parts)."""
    texts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(part.get("text", "")) for part in content
                              if isinstance(part, dict))
        texts.append(content if isinstance(content, str) else "")
    return texts


def prompt_token_counts(prompt: str | list[str] | list[int] | list[list[int]]) -> list[int]:
    """Prompt tokens per prompt of a completion request (token-id lists count themselves)."""
    if isinstance(prompt, str):
        return [text.estimate_tokens(prompt) + 1]
    if all(isinstance(item, int) for item in prompt):
        return [len(prompt)]
    return [len(item) if isinstance(item, list) else text.estimate_tokens(str(item)) + 1
            for item in prompt]


def chat_spec(request: ChatRequest, config: SimConfig) -> GenerationSpec:
    prompt_tokens = text.chat_prompt_tokens(message_texts(request.messages))
    requested = (request.max_completion_tokens if request.max_completion_tokens is not None
                 else request.max_tokens)
    return _spec("chatcmpl", [prompt_tokens], requested, request, config)


def completion_spec(request: CompletionRequest, config: SimConfig) -> GenerationSpec:
    assert request.prompt is not None  # the model validator guarantees it
    return _spec("cmpl", prompt_token_counts(request.prompt), request.max_tokens, request, config)


def _spec(prefix: str, prompts: list[int], requested: int | None, request: SamplingRequest,
          config: SimConfig) -> GenerationSpec:
    temperature = config.default_temperature if request.temperature is None \
        else request.temperature
    n = 1 if request.n is None else request.n
    max_tokens = [_max_tokens(requested, prompt, config) for prompt in prompts]
    try:
        check_sampling(n, temperature, requested)
    except VLLMValidationError as exc:
        raise bad_request(exc) from None
    return GenerationSpec(id_prefix=prefix, prompt_tokens=tuple(prompts), n=n,
                          max_tokens=tuple(max_tokens), temperature=temperature,
                          ignore_eos=request.ignore_eos)


def _max_tokens(requested: int | None, prompt_tokens: int, config: SimConfig) -> int:
    room = config.max_model_len - prompt_tokens
    if requested is None:
        if room < 1:
            raise bad_request(VLLMValidationError(
                f"The prompt ({prompt_tokens} tokens) is longer than the maximum model length "
                f"of {config.max_model_len}.", parameter="input_tokens", value=prompt_tokens))
        return room
    if requested > room:
        raise bad_request(VLLMValidationError(
            f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's "
            f"maximum context length is {config.max_model_len} tokens and your request has "
            f"{prompt_tokens} input tokens ({requested} > {config.max_model_len} - "
            f"{prompt_tokens}).", parameter="max_tokens", value=requested))
    return requested


def check_sampling(n: int, temperature: float, max_tokens: int | None) -> None:
    """SamplingParams._verify_args for the parameters the simulator honours, in vLLM's order."""
    if n < 1:
        raise VLLMValidationError(f"n must be at least 1, got {n}.", parameter="n", value=n)
    if not math.isfinite(temperature):
        raise VLLMValidationError(f"temperature must be a finite number, got {temperature}.",
                                  parameter="temperature", value=temperature)
    if temperature < 0.0:
        raise VLLMValidationError(f"temperature must be non-negative, got {temperature}.",
                                  parameter="temperature", value=temperature)
    if temperature > MAX_TEMPERATURE:
        raise VLLMValidationError(f"temperature must be in [0, 2], got {temperature}.",
                                  parameter="temperature", value=temperature)
    if max_tokens is not None and max_tokens < 1:
        raise VLLMValidationError(f"max_tokens must be at least 1, got {max_tokens}.",
                                  parameter="max_tokens", value=max_tokens)
    if temperature < GREEDY_EPSILON and n > 1:
        raise VLLMValidationError(f"n must be 1 when using greedy sampling, got {n}.")

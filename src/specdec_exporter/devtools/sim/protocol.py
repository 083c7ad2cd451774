"""OpenAI request validation as vLLM does it, in its order, with its error bodies and statuses."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from specdec_exporter.devtools.sim import text
from specdec_exporter.devtools.sim.settings import SimConfig
from specdec_exporter.devtools.sim.simulation import GenerationSpec

GREEDY_EPSILON = 1e-5
MAX_TEMPERATURE = 2.0
RequestT = TypeVar("RequestT", bound="SamplingRequest")


class VLLMValidationError(Exception):
    """vLLM's validation error (vllm/exceptions.py): its text carries the parameter and value.

    Not a ValueError, so a pydantic validator that raises it is not turned into a validation
    error list: it reaches the client as a plain ``BadRequestError``, as in vLLM.
    """

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

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


def usage_options(options: StreamOptions | None, force: bool) -> tuple[bool, bool]:
    """(usage chunk, running usage on every chunk): vLLM's should_include_usage."""
    if force:
        return True, True
    if options is None:
        return False, False
    include = bool(options.include_usage)
    return include, include and bool(options.continuous_usage_stats)


class SamplingRequest(BaseModel):
    """Fields both endpoints share; unknown fields are allowed and ignored, as in vLLM."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = None
    n: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    seed: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _stream_options_need_stream(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise VLLMValidationError(
                "Stream options can only be defined when `stream=True`.", parameter="stream_options"
            )
        return data


class ChatRequest(SamplingRequest):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0

    @model_validator(mode="before")
    @classmethod
    def _top_logprobs_need_logprobs(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        top = data.get("top_logprobs")
        if top is None:
            return data
        if isinstance(top, bool) or not isinstance(top, int | float):
            raise VLLMValidationError(
                "`top_logprobs` must be an integer.", parameter="top_logprobs", value=top
            )
        if top < 0 and top != -1:
            raise VLLMValidationError(
                "`top_logprobs` must be a positive value or -1.",
                parameter="top_logprobs",
                value=top,
            )
        if (top == -1 or top > 0) and not data.get("logprobs"):
            raise VLLMValidationError(
                "when using `top_logprobs`, `logprobs` must be set to true.",
                parameter="top_logprobs",
            )
        return data

    @property
    def requested_tokens(self) -> tuple[int | None, str]:
        """max_completion_tokens wins over max_tokens; the parameter named in errors."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"


COMPLETION_DEFAULT_MAX_TOKENS = 16
"""CompletionRequest.max_tokens in vLLM: absent or null means 16."""


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]] | None = None
    echo: bool | None = False

    @model_validator(mode="before")
    @classmethod
    def _prompt_required(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("prompt") in (None, ""):
            raise VLLMValidationError(
                "Either prompt or prompt_embeds must be provided and non-empty.", parameter="prompt"
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _null_max_tokens_is_the_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_tokens") is None:
            return {**data, "max_tokens": COMPLETION_DEFAULT_MAX_TOKENS}
        return data


@dataclass(frozen=True)
class Echo:
    """What a completion with ``echo`` repeats before each prompt's output."""

    texts: tuple[str, ...]
    token_ids: tuple[tuple[int, ...], ...]
    prompt_only: bool
    """``max_tokens: 0``: vLLM generates one token and returns the prompt alone."""


@dataclass(frozen=True)
class Plan:
    """A validated request: what to generate and how to answer."""

    spec: GenerationSpec
    stream: bool
    include_usage: bool = False
    continuous_usage: bool = False
    echo: Echo | None = None


MEDIA_TYPE_ERROR = "Unsupported Media Type: Only 'application/json' is allowed"


def is_json_media_type(content_type: bytes | None) -> bool:
    """FastAPI parses a body as JSON without a Content-Type or with a */json or */*+json one."""
    if content_type is None:
        return True
    subtype = content_type.decode("latin-1").split(";", 1)[0].strip().lower().partition("/")[2]
    return subtype == "json" or subtype.endswith("+json")


def parse_request(
    raw: bytes, model: type[RequestT], content_type: bytes | None = b"application/json"
) -> RequestT:
    """Decode and validate a body as FastAPI + vLLM would, or raise ApiError 400.

    The order is theirs: JSON decoding, vLLM's Content-Type check (validate_json_request), then
    the request model, whose vLLM validators answer ``BadRequestError``.
    """
    data: Any = None
    if raw and is_json_media_type(content_type):
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            position = exc.pos if isinstance(exc, json.JSONDecodeError) else exc.start
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else exc.reason
            raise validation_failure(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", position),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": reason},
                    }
                ]
            ) from None
    media_type = (content_type or b"").decode("latin-1").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise validation_failure([MEDIA_TYPE_ERROR])
    if not raw:
        raise validation_failure(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    try:
        return model.model_validate(data)
    except VLLMValidationError as exc:
        raise bad_request(exc) from None
    except ValidationError as exc:
        errors = [
            {**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)
        ]
        raise validation_failure(errors) from None


MAX_REPORTED_ERRORS = 10
MAX_ERROR_INPUT_CHARS = 200
MAX_ERROR_CHARS = 1000


def validation_failure(errors: Sequence[dict[str, Any] | str]) -> ApiError:
    """vLLM's RequestValidationError handler: 400, type "Bad Request", bounded errors listed.

    As in vllm/entrypoints/serve/exception_handling/handlers/validation.py: ``loc`` dotted, each
    ``input`` summarised, at most ten errors, each at most 1,000 characters.
    """
    param = None
    first = errors[0] if errors else None
    if isinstance(first, dict) and first.get("loc"):
        param = ".".join(str(part) for part in first["loc"])
    label = "error" if len(errors) == 1 else "errors"
    reported = errors[:MAX_REPORTED_ERRORS]
    message = f"{len(errors)} validation {label}:\n" + "".join(
        f"  {_format_error(error)}\n" for error in reported
    )
    if len(errors) > len(reported):
        message += f"  ...and {len(errors) - len(reported)} more {label}\n"
    return ApiError(400, message.rstrip(), "Bad Request", param)


def _format_error(error: dict[str, Any] | str) -> str:
    if isinstance(error, dict):
        error = dict(error)
        if "input" in error:
            error["input"] = _summarize_input(error["input"])
        if isinstance(error.get("loc"), tuple | list):
            error["loc"] = ".".join(str(part) for part in error["loc"])
    text = str(error)
    return text[:MAX_ERROR_CHARS] + "...[truncated]" if len(text) > MAX_ERROR_CHARS else text


def _summarize_input(value: object) -> object:
    if isinstance(value, str):
        return (
            value[:MAX_ERROR_INPUT_CHARS] + "...[truncated]"
            if len(value) > MAX_ERROR_INPUT_CHARS
            else value
        )
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    return (
        text[:MAX_ERROR_INPUT_CHARS] + "...[truncated]"
        if len(text) > MAX_ERROR_INPUT_CHARS
        else text
    )


def check_model(requested: str | None, config: SimConfig) -> None:
    if requested and requested != config.served_model_name:
        raise ApiError(
            404,
            f"The model `{requested}` does not exist. Valid aliases: {config.served_model_name}.",
            "NotFoundError",
            "model",
        )


def message_texts(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The text of each chat message (string content or a list of text parts)."""
    texts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        texts.append(content if isinstance(content, str) else "")
    return texts


Prompt = str | list[int]


def prompts_of(prompt: str | list[str] | list[int] | list[list[int]]) -> list[Prompt]:
    """The prompts of a completion request: a string, token ids, or a list of either."""
    if isinstance(prompt, str):
        return [prompt]
    prompts: list[Prompt] = []
    ids: list[int] = []
    for item in prompt:
        if isinstance(item, int):
            ids.append(item)
        else:
            prompts.append(item)
    return [ids] if ids else prompts


def prompt_tokens(prompt: Prompt) -> int:
    """Token ids count themselves; a text is estimated, plus a BOS token."""
    return len(prompt) if isinstance(prompt, list) else text.estimate_tokens(prompt) + 1


def chat_plan(request: ChatRequest, config: SimConfig) -> Plan:
    """vLLM's chat checks in its order: model, output room, conversation, prompt, sampling."""
    check_model(request.model, config)
    requested, parameter = request.requested_tokens
    _check_output_limit(requested, parameter, config)
    if not request.messages:
        raise bad_request(
            VLLMValidationError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        )
    tokens = text.chat_prompt_tokens(message_texts(request.messages))
    return _plan("chatcmpl", [tokens], [True], requested, request=request, config=config)


def completion_plan(request: CompletionRequest, config: SimConfig) -> Plan:
    check_model(request.model, config)
    _check_output_limit(request.max_tokens, "max_tokens", config)
    assert request.prompt is not None  # the model validator guarantees it
    prompts = prompts_of(request.prompt)
    if not prompts:
        raise bad_request(VLLMValidationError("You must pass at least one prompt"))
    echo_only = bool(request.echo) and request.max_tokens == 0
    plan = _plan(
        "cmpl",
        [prompt_tokens(p) for p in prompts],
        [isinstance(p, str) for p in prompts],
        1 if echo_only else request.max_tokens,
        request=request,
        config=config,
    )
    if not request.echo:
        return plan
    echo = Echo(
        texts=tuple(p if isinstance(p, str) else "" for p in prompts),
        token_ids=tuple(
            tuple(p) if isinstance(p, list) else text.placeholder_ids(p) for p in prompts
        ),
        prompt_only=echo_only,
    )
    return replace(plan, echo=echo)


def _check_output_limit(requested: int | None, parameter: str, config: SimConfig) -> None:
    """TokenizeParams: more output than the context holds is refused before anything else."""
    if requested and requested > config.max_model_len:
        raise bad_request(
            VLLMValidationError(
                f"{parameter}={requested} cannot be greater than max_model_len="
                f"{config.max_model_len}. Please request fewer output tokens.",
                parameter=parameter,
                value=requested,
            )
        )


def _plan(
    prefix: str,
    prompts: list[int],
    texts: list[bool],
    requested: int | None,
    *,
    request: SamplingRequest,
    config: SimConfig,
) -> Plan:
    temperature = config.default_temperature if request.temperature is None else request.temperature
    n = 1 if request.n is None else request.n
    try:
        max_tokens = [
            _max_tokens(requested, tokens, is_text, config)
            for tokens, is_text in zip(prompts, texts, strict=True)
        ]
        check_sampling(
            n, temperature, 1.0 if request.top_p is None else request.top_p, min(max_tokens)
        )
    except VLLMValidationError as exc:
        raise bad_request(exc) from None
    spec = GenerationSpec(
        id_prefix=prefix,
        prompt_tokens=tuple(prompts),
        n=n,
        max_tokens=tuple(max_tokens),
        temperature=temperature,
        ignore_eos=request.ignore_eos,
    )
    include, continuous = usage_options(request.stream_options, config.enable_force_include_usage)
    stream = bool(request.stream)
    return Plan(spec, stream, include and stream, continuous and stream)


def _max_tokens(requested: int | None, tokens: int, is_text: bool, config: SimConfig) -> int:
    """The prompt length check, then vLLM's get_max_tokens: the output fills what is left.

    A text prompt is tokenized with truncation at max-model-len + 1, so vLLM reports "at least"
    that many tokens; token ids are counted as given.
    """
    limit = config.max_model_len
    if is_text:
        tokens = min(tokens, limit + 1)
    if tokens > limit:
        qualifier = "at least " if tokens == limit + 1 else ""
        raise VLLMValidationError(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {qualifier}{tokens} input tokens, which exceeds this limit even without "
            f"any output tokens. Please reduce the length of the input prompt.",
            parameter="input_tokens",
            value=tokens,
        )
    room = limit - tokens
    return room if requested is None else min(room, requested)


def check_sampling(n: int, temperature: float, top_p: float, max_tokens: int) -> None:
    """SamplingParams._verify_args for the parameters the simulator honours, in vLLM's order."""
    if n < 1:
        raise VLLMValidationError(f"n must be at least 1, got {n}.")
    if not math.isfinite(temperature):
        raise VLLMValidationError(
            f"temperature must be a finite number, got {temperature}.",
            parameter="temperature",
            value=temperature,
        )
    if temperature < 0.0:
        raise VLLMValidationError(
            f"temperature must be non-negative, got {temperature}.",
            parameter="temperature",
            value=temperature,
        )
    if temperature > MAX_TEMPERATURE:
        raise VLLMValidationError(
            f"temperature must be in [0, 2], got {temperature}.",
            parameter="temperature",
            value=temperature,
        )
    if not 0.0 < top_p <= 1.0:
        raise VLLMValidationError(
            f"top_p must be in (0, 1], got {top_p}.", parameter="top_p", value=top_p
        )
    if max_tokens < 1:
        raise VLLMValidationError(
            f"max_tokens must be at least 1, got {max_tokens}.",
            parameter="max_tokens",
            value=max_tokens,
        )
    if temperature < GREEDY_EPSILON and n > 1:
        raise VLLMValidationError(f"n must be 1 when using greedy sampling, got {n}.")

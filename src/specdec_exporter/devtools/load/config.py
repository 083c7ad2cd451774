"""What a load run is told: LoadConfig, built from the fields that `load`'s flags take too.

Each default, bound and help text is written once, here: the flag models of `load` and `sweep`
derive from ClientOptions and LoadOptions, and LoadConfig, sweep's and calibrate's configs from
the same models, so a config built in Python is held to the flags' checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import CliToggleFlag

from specdec_exporter.devtools.load.mix import MixEntry, parse_mix, parse_temperatures
from specdec_exporter.options import HttpUrl, Metavar, Seed, refuse_together
from specdec_exporter.trust import VllmTrust


def _parsed_by(parse: Callable[[str], object]) -> AfterValidator:
    """Check a flag's text with ``parse``; the text itself is kept (what --help shows)."""

    def check(text: str) -> str:
        parse(text)
        return text

    return AfterValidator(check)


Endpoint = Literal["chat", "completions"]
Count = Annotated[int, Field(ge=1, le=1_000_000)]
MixText = Annotated[str, _parsed_by(parse_mix), Metavar("MIX")]
"""`load --temperatures`: a temperature mix, parsed by ``parse_mix``."""
TemperatureListText = Annotated[str, _parsed_by(parse_temperatures), Metavar("LIST")]
"""`sweep --temperatures` and `calibrate --temperatures`: a list, parsed by
``parse_temperatures``."""

DEFAULT_MIX_TEXT = "0:0.3,0.7:0.5,1.0:0.2"

BUILTIN_PROMPTS = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in three sentences what a hash map is.",
    "List five prime numbers and say why each is prime.",
    "def fibonacci(n):",
    "Summarise the plot of Romeo and Juliet in two sentences.",
    "Translate 'good morning, how are you?' into French and German.",
    "Write a SQL query that counts orders per customer.",
    "What is the difference between TCP and UDP?",
)


class RequestTimeout(BaseModel):
    """The one request timeout of every command that sends completions (`load`, `sweep`,
    `calibrate`): a server that stalls a request fails that request, never the run."""

    timeout: float = Field(
        default=600.0,
        ge=0.1,
        le=86400,
        description="timeout of one whole request, seconds (connecting: at most 10 s)",
    )


class ClientOptions(VllmTrust, RequestTimeout):
    """Where `load` and `sweep` send their requests, how they trust it and what each asks for:
    flags of both."""

    url: Annotated[HttpUrl, Metavar("URL")] = Field(
        default="http://127.0.0.1:8000",
        description="base URL of the OpenAI-compatible server, with or without /v1: vLLM, the "
        "simulator or the sidecar's request tap",
    )
    model: str | None = Field(
        default=None, description="model name; unset: the first id from GET /v1/models"
    )
    max_tokens: Count = Field(default=64, description="max_tokens of every request")


class LoadOptions(ClientOptions):
    """The rest of a load run that `load` takes as flags of the same names."""

    endpoint: Endpoint = Field(
        default="chat", description="/v1/chat/completions or /v1/completions"
    )
    concurrency: Count = Field(default=8, description="requests in flight at once")
    requests: Count = Field(default=100, description="send this many requests, then stop")
    duration: float | None = Field(
        default=None,
        ge=0.1,
        le=7 * 86400,
        description="instead of --requests: start requests for this many seconds; those in "
        "flight then finish",
    )
    stream_share: float = Field(
        default=0.0, ge=0.0, le=1.0, description="share 0..1 of requests sent with stream: true"
    )
    include_usage: CliToggleFlag[bool] = Field(
        default=True,
        description="ask streams for stream_options.include_usage; --no-include-usage does not",
    )
    seed: Seed | None = Field(
        default=None,
        description="seed of the temperature, stream and prompt choices; unset: random",
    )

    @model_validator(mode="after")
    def _one_bound(self) -> Self:
        refuse_together(self, "requests", "duration")
        return self


class RequestContent(BaseModel):
    """What only Python hands to a load, a sweep or a calibration: the prompts (the commands read
    them from --prompts) and the API key (from --api-key, a secret)."""

    prompts: tuple[str, ...] = Field(default=BUILTIN_PROMPTS, min_length=1)
    api_key: str | None = Field(default=None, repr=False)


class LoadConfig(LoadOptions, RequestContent):
    """Everything a run needs. ``requests`` bounds it, unless ``duration`` is given instead."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mix: tuple[MixEntry, ...] = Field(default=parse_mix(DEFAULT_MIX_TEXT), min_length=1)
    connect_timeout: float = 10.0

    @property
    def request_limit(self) -> int | None:
        """How many requests to send; None when ``duration`` bounds the run."""
        return None if self.duration is not None else self.requests

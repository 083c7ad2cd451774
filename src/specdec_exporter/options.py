"""Option types that every room's settings share: the config error, the URL type, the cap on a
/metrics body, and the field markers and checks of settings models whose flags are generated.

Neutral ground: the sidecar, the tap, the commands and the dev tools import it; it imports none of
them, so no room reaches up into another for a type.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar, get_args, get_origin

import httpx
from pydantic import AfterValidator, BaseModel, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

M = TypeVar("M")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""Cap on a /metrics body, bytes: of the sidecar's scrapes and of the sweep's."""
MAX_TEMPERATURE = 2.0
"""The highest temperature vLLM takes: 0.32 answers 400 "temperature must be in [0, 2]" above it
(tests/fixtures/vllm-0.32.0-cpu/edge-cases/chat_temperature_2.5.json)."""
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
"""A seed as a person gives it: 0 to 2**32 - 1, the range every random generator takes."""


class ConfigError(Exception):
    """A setting is invalid; the message is one readable line."""


_URL_CREDENTIALS = re.compile(r"(?i)\b(https?://)[^\s/?#@]*(?:@[^\s/?#@]*)*@")


def redact_url(text: str) -> str:
    """``text`` (a URL, or a message or page holding URLs) with the user and password of every
    URL (``http://user:pw@host``) shown as ``***``: what every message, log line and page shows
    of a URL. The requests themselves keep them."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def _check_url(value: str) -> str:
    """A server's base URL as every command takes it: http(s)://HOST:PORT, with or without the
    OpenAI API's /v1 (dropped here, the one place, with a trailing /)."""
    _check_http(value)
    return value.rstrip("/").removesuffix("/v1").rstrip("/")


def _check_link(value: str) -> str:
    """A link the live page shows (a runbook, a dashboard), kept as given: never fetched, so its
    path is the reader's business, but a user or password in it would reach every visitor."""
    _check_http(value)
    if httpx.URL(value).userinfo:
        raise ValueError(
            "a link on the live page holds no user or password (every visitor of the page "
            f"would read them), got {redact_url(value)!r}"
        )
    return value


def _check_http(value: str) -> None:
    """Refuses what is not an http(s) URL with a host. Parsed here, once, by httpx, the library
    that will use it: a URL it would refuse later is refused now."""
    shown = redact_url(value)
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {shown!r}")
    if any(char.isspace() for char in value):
        raise ValueError(f"a URL has no spaces, got {shown!r}")
    try:
        url = httpx.URL(value)
        port = url.port
    except httpx.InvalidURL as exc:
        raise ValueError(f"not a URL: {shown!r} ({redact_url(str(exc))})") from None
    if not url.host:
        raise ValueError(f"no host in {shown!r}; expected http://HOST:PORT")
    if port is not None and not 0 < port <= 65535:
        raise ValueError(f"port out of range in {shown!r}")


HttpUrl = Annotated[str, AfterValidator(_check_url)]
"""An http:// or https:// base URL, without a trailing slash or /v1."""
LinkUrl = Annotated[str, AfterValidator(_check_link)]
"""An http:// or https:// URL the live page links to, as given, without credentials."""


@dataclass(frozen=True)
class Metavar:
    """Field metadata: what ``--help`` shows for the flag's value (``--prompts FILE``) instead of
    the field's type, for a type that would hide the value's format."""

    text: str


@dataclass(frozen=True)
class FromEnv:
    """Field metadata: the environment variable the field falls back to when its flag is absent
    (``--api-key``, else ``$OPENAI_API_KEY``). ``--help`` names it; empty counts as unset."""

    variable: str


def annotated_items(field: FieldInfo) -> list[object]:
    """The field's metadata, and that of ``Annotated`` union members (``Annotated[int, ...] |
    None``)."""
    items = list(field.metadata)
    for member in get_args(field.annotation):
        if get_origin(member) is Annotated:
            items += member.__metadata__
    return items


def field_marker(field: FieldInfo, kind: type[M]) -> M | None:
    """The first ``kind`` among the field's metadata, looking inside ``Annotated`` union members
    too (``Annotated[int, ...] | None``)."""
    return next((item for item in annotated_items(field) if isinstance(item, kind)), None)


def flag_of(model: type[BaseModel], field: str) -> str:
    """The flag of one of ``model``'s fields: ``--`` and its name (or alias) in kebab case."""
    return "--" + (model.model_fields[field].alias or field).replace("_", "-")


def refuse_together(settings: BaseModel, *fields: str) -> None:
    """Flags that exclude each other: ValueError naming two of ``fields`` that were both given.
    For a settings model's ``model_validator(mode="after")``."""
    given = [
        flag_of(type(settings), field) for field in fields if field in settings.model_fields_set
    ]
    if len(given) > 1:
        raise ValueError(f"{given[1]} is not allowed with {given[0]}")


def describe_validation_error(
    exc: ValidationError, given_as: Callable[[str], str] | None = None
) -> str:
    """One line naming each bad setting. Our own validators' messages (``value_error``) say what
    they got; pydantic's built-in ones (bounds, types) get the input appended. ``given_as``: how
    a person gives a field, from its name (``--interval (or SPECDEC_INTERVAL)``); without it, the
    field's name."""
    parts = []
    for error in exc.errors():
        location = [str(item) for item in error["loc"]]
        if location and given_as is not None:  # a list's item is told by its value, below
            location = [given_as(location[0])] + [i for i in location[1:] if not i.isdigit()]
        where = ".".join(location)
        if error["type"] == "value_error":
            message = str(error.get("ctx", {}).get("error", error["msg"]))
        else:
            message = f"{error['msg']} (got {error.get('input')!r})"
        parts.append(f"{where}: {message}" if where else message)
    return "invalid setting: " + "; ".join(parts)


def environment_variable(model: type[BaseModel], name: str) -> str | None:
    """The variable field ``name`` of ``model`` falls back to without its flag: the one its
    FromEnv names; else, for a settings model with an ``env_prefix``, the prefix and the name
    (``SPECDEC_INTERVAL``); else none (a model read from flags alone)."""
    marker = field_marker(model.model_fields[name], FromEnv)
    if marker is not None:
        return marker.variable
    prefix = model.model_config.get("env_prefix", "") if issubclass(model, BaseSettings) else ""
    return (str(prefix) + name).upper() if prefix else None


def with_variables(model: type[BaseModel], message: str) -> str:
    """``message`` with each flag of ``model`` it names followed by the variable it falls back
    to (``--speculative-method (or SPECDEC_SPECULATIVE_METHOD)``): for messages written where
    only the flags are known (the core's)."""
    fields = {
        flag_of(model, name): field.alias or name for name, field in model.model_fields.items()
    }
    name_of = given_as(model)

    def named(match: re.Match[str]) -> str:
        field = fields.get(match.group(0))
        return match.group(0) if field is None else name_of(field)

    return re.sub(r"--[a-z][a-z0-9-]*(?![a-z0-9-])", named, message)


def given_as(model: type[BaseModel]) -> Callable[[str], str]:
    """How a person gives a field of ``model``, by its name or alias as a validation error names
    it: the flag, and the variable it falls back to (``--interval (or SPECDEC_INTERVAL)``)."""
    names = {field.alias or name: name for name, field in model.model_fields.items()}

    def name_of(key: str) -> str:
        name = names.get(key)
        if name is None:
            return key
        flag = flag_of(model, name)
        variable = environment_variable(model, name)
        return flag if variable is None else f"{flag} (or {variable})"

    return name_of

"""A command's flags generated from its settings model (pydantic-settings' CLI source), and the
model built back from the parsed flags: each default, check and help text is written once."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from specdec_exporter.sidecar.config import CalibrationFile, ConfigError, HttpUrl, ListenAddress

S = TypeVar("S", bound=BaseSettings)
M = TypeVar("M")

_CLI_STYLE: dict[str, Any] = {
    "cli_kebab_case": True,  # field scrape_timeout is flag --scrape-timeout
    "cli_implicit_flags": "toggle",  # a bool defaulting to False is a plain --flag
    "cli_hide_none_type": True,
    "cli_avoid_json": True,
}


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


TYPE_METAVARS: dict[str, str] = {
    "int": "N",
    "float": "NUMBER",
    "str": "TEXT",
    "Path": "PATH",
    "tuple[int,...]": "LIST",
    "tuple[float,...]": "LIST",
    "tuple[str,...]": "LIST",
}
"""What --help shows for a value of a plain type (pydantic-settings shows the Python type)."""
ALIAS_METAVARS: tuple[tuple[Any, str], ...] = (
    (HttpUrl, "URL"),
    (ListenAddress, "HOST:PORT"),
    (CalibrationFile, "FILE"),
)
"""The same for the shared checked types, known by their validators."""


def _annotated_items(field: FieldInfo) -> list[Any]:
    """The field's metadata, and that of ``Annotated`` union members (``Annotated[int, ...] |
    None``)."""
    items = list(field.metadata)
    for member in get_args(field.annotation):
        if get_origin(member) is Annotated:
            items += member.__metadata__
    return items


def readable_metavar(field: FieldInfo, generated: str) -> str:
    """``--help``'s name for the flag's value: the field's Metavar, else one for its type."""
    marker = field_marker(field, Metavar)
    if marker is not None:
        return marker.text
    items = _annotated_items(field)
    for alias, text in ALIAS_METAVARS:
        if all(any(item is mine for item in items) for mine in get_args(alias)[1:]):
            return text
    return TYPE_METAVARS.get(generated, generated)


def default_text(value: object) -> str | None:
    """A default as a person writes it on the command line; None for "unset" (None, False or an
    empty list), which the help text explains in its own words."""
    if value is None or value is False or value == ():
        return None
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _readable_help(help_text: str, field: FieldInfo) -> str:
    """pydantic-settings' help with its ``(default: <Python repr>)`` in a person's terms."""
    generated = f"(default: {'None' if field.default is None else field.default})"
    shown = default_text(field.default)
    return help_text.replace(f" {generated}", "" if shown is None else f" (default: {shown})")


def field_marker(field: FieldInfo, kind: type[M]) -> M | None:
    """The first ``kind`` among the field's metadata, looking inside ``Annotated`` union members
    too (``Annotated[int, ...] | None``)."""
    return next((item for item in _annotated_items(field) if isinstance(item, kind)), None)


class _MarkedEnvironment(PydanticBaseSettingsSource):
    """The variables that FromEnv names, for their fields alone."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        marker = field_marker(field, FromEnv)
        value = os.environ.get(marker.variable) if marker else None
        return value or None, field.alias or field_name, False

    def __call__(self) -> dict[str, Any]:
        found = (
            self.get_field_value(f, name) for name, f in self.settings_cls.model_fields.items()
        )
        return {key: value for value, key, _ in found if value is not None}


class FlagsOnly(BaseSettings):
    """Base of command settings read from flags alone: no environment variable is consulted but
    those a field names with FromEnv."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _MarkedEnvironment(settings_cls))


def _flag_adder(
    model: type[BaseSettings], group: argparse._ArgumentGroup | None
) -> Callable[..., argparse.Action]:
    """pydantic-settings' add_argument, with readable metavars and defaults, and each field's
    FromEnv applied."""
    fields = {field.alias or name: field for name, field in model.model_fields.items()}

    def add_argument(
        parser: argparse.ArgumentParser, *names: str, **options: Any
    ) -> argparse.Action:
        field = fields.get(options.get("dest", ""))
        if field is not None:
            if "metavar" in options:
                options["metavar"] = readable_metavar(field, options["metavar"])
            options["help"] = _readable_help(options.get("help", ""), field)
            variable = field_marker(field, FromEnv)
            if variable is not None:
                options["help"] = f"{options.get('help', '')} [env: {variable.variable}]".strip()
        return (group or parser).add_argument(*names, **options)

    return add_argument


def _cli_source(
    model: type[BaseSettings],
    parser: argparse.ArgumentParser | None = None,
    group: argparse._ArgumentGroup | None = None,
) -> CliSettingsSource[Any]:
    return CliSettingsSource(
        model, root_parser=parser, add_argument_method=_flag_adder(model, group), **_CLI_STYLE
    )


def add_settings_flags(
    parser: argparse.ArgumentParser, model: type[BaseSettings], title: str | None = None
) -> None:
    """One flag per field of ``model``: kebab-case name, help from its description, default and
    environment variable; under a heading of their own with ``title``. Values stay text until the
    model validates them."""
    _cli_source(model, parser, parser.add_argument_group(title) if title else None)


def settings_from_args(model: type[S], args: argparse.Namespace) -> S:
    """Build ``model`` from the parsed flags (flags win over the environment, for models that read
    it); arguments that are not fields are ignored. A bad value raises ConfigError (one line)."""
    try:
        return model(_cli_settings_source=_cli_source(model)(parsed_args=args))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    except SettingsError as exc:
        raise ConfigError(f"invalid setting: {exc}") from None


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


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming each bad setting. Our own validators' messages (``value_error``) say what
    they got; pydantic's built-in ones (bounds, types) get the input appended."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(item) for item in error["loc"])
        if error["type"] == "value_error":
            message = str(error.get("ctx", {}).get("error", error["msg"]))
        else:
            message = f"{error['msg']} (got {error.get('input')!r})"
        parts.append(f"{where}: {message}" if where else message)
    return "invalid setting: " + "; ".join(parts)

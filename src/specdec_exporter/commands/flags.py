"""A command's flags generated from its settings model (pydantic-settings' CLI source), and the
model built back from the parsed flags: each default, check and help text is written once.
The field markers and checks these models use (``Metavar``, ``FromEnv``, ``refuse_together``) are
in ``specdec_exporter.options``, where the dev tools' models find them too."""

from __future__ import annotations

import argparse
import os
import re
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from specdec_exporter.options import (
    ConfigError,
    FromEnv,
    HttpUrl,
    Metavar,
    annotated_items,
    describe_validation_error,
    field_marker,
    given_as,
)
from specdec_exporter.sidecar.config import CalibrationFile, ListenAddress

S = TypeVar("S", bound=BaseSettings)

_CLI_STYLE: dict[str, Any] = {
    "cli_kebab_case": True,  # field scrape_timeout is flag --scrape-timeout
    "cli_implicit_flags": "toggle",  # a bool defaulting to False is a plain --flag
    "cli_hide_none_type": True,
    "cli_avoid_json": True,
}


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


def readable_metavar(field: FieldInfo, generated: str) -> str:
    """``--help``'s name for the flag's value: the field's Metavar, else one for its type."""
    marker = field_marker(field, Metavar)
    if marker is not None:
        return marker.text
    items = annotated_items(field)
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

    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,  # every number finite: inf and nan are refused, naming the flag
    )

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
            named = f"[env: {variable.variable}]" if variable is not None else ""
            if named and named not in options.get("help", ""):  # a SPECDEC_ model names it
                options["help"] = f"{options.get('help', '')} {named}".strip()
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


_MODELS: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[type[BaseSettings]]] = (
    weakref.WeakKeyDictionary()
)


def add_settings_flags(
    parser: argparse.ArgumentParser, model: type[BaseSettings], title: str | None = None
) -> None:
    """One flag per field of ``model``: kebab-case name, help from its description, default and
    environment variable; under a heading of their own with ``title``. Values stay text until the
    model validates them."""
    _cli_source(model, parser, parser.add_argument_group(title) if title else None)
    _MODELS.setdefault(parser, []).append(model)


def settings_models(parser: argparse.ArgumentParser) -> list[type[BaseSettings]]:
    """The settings models whose flags ``add_settings_flags`` gave ``parser``, in order: what a
    command's flags mean, for the tests that walk every flag of every command."""
    return list(_MODELS.get(parser, []))


def settings_from_args(model: type[S], args: argparse.Namespace) -> S:
    """Build ``model`` from the parsed flags (flags win over the environment, for models that read
    it); arguments that are not fields are ignored. A bad value raises ConfigError (one line,
    naming the flag and the variable it was given by)."""
    _refuse_empty(model, args)
    try:
        return model(_cli_settings_source=_cli_source(model)(parsed_args=args))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, given_as(model))) from None
    except SettingsError as exc:
        raise ConfigError(f"invalid setting: {_settings_error(model, exc)}") from None


def _settings_error(model: type[BaseSettings], exc: SettingsError) -> str:
    """pydantic-settings' "error parsing value for field "concurrencies" from source ..." in a
    person's terms: the flag and its variable, and what was expected."""
    match = re.search(r'field "(\w+)"', str(exc))
    if match is None or match.group(1) not in model.model_fields:
        return str(exc)
    name = match.group(1)
    field = model.model_fields[name]
    expected = "a comma-separated list" if get_origin(field.annotation) is tuple else "a value"
    return f"{given_as(model)(field.alias or name)}: cannot read it as {expected} of its kind"


def _refuse_empty(model: type[BaseSettings], args: argparse.Namespace) -> None:
    """An empty flag value (``--vllm-url "$URL"`` with ``URL`` unset) is a usage error, never
    "the default" or "the current directory": ConfigError naming the flag."""
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = getattr(args, key, None)
        values = value if isinstance(value, list) else [value]
        if any(isinstance(item, str) and not item.strip() for item in values):
            raise ConfigError(
                f"invalid setting: {given_as(model)(key)}: empty value (an unset variable?); "
                "give a value, or leave the flag out for its default"
            )

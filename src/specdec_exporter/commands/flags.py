"""A command's flags generated from its settings model (pydantic-settings' CLI source), and the
model built back from the parsed flags: each default, check and help text is written once."""

from __future__ import annotations

import argparse
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from specdec_exporter.sidecar.config import ConfigError

S = TypeVar("S", bound=BaseSettings)

_CLI_STYLE: dict[str, Any] = {
    "cli_kebab_case": True,  # field scrape_timeout is flag --scrape-timeout
    "cli_implicit_flags": "toggle",  # a bool defaulting to False is a plain --flag
    "cli_hide_none_type": True,
    "cli_avoid_json": True,
}


class FlagsOnly(BaseSettings):
    """Base of command settings read from flags alone: no environment variable is consulted."""

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
        return (init_settings,)


def _cli_source(
    model: type[BaseSettings], parser: argparse.ArgumentParser | None = None
) -> CliSettingsSource[Any]:
    return CliSettingsSource(model, root_parser=parser, **_CLI_STYLE)


def add_settings_flags(parser: argparse.ArgumentParser, model: type[BaseSettings]) -> None:
    """One flag per field of ``model``: kebab-case name, help from its description, default and
    environment variable. Values stay text until the model validates them."""
    _cli_source(model, parser)


def settings_from_args(model: type[S], args: argparse.Namespace) -> S:
    """Build ``model`` from the parsed flags (flags win over the environment, for models that read
    it); arguments that are not fields are ignored. A bad value raises ConfigError (one line)."""
    try:
        return model(_cli_settings_source=_cli_source(model)(parsed_args=args))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    except SettingsError as exc:
        raise ConfigError(f"invalid setting: {exc}") from None


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

"""Flags generated from settings models: metavars, an environment fallback, flags that exclude
each other, and every command's --help naming each field with its help text and default."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Annotated, Self

import pytest
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings

from specdec_exporter.cli import main
from specdec_exporter.commands.calibrate import CalibrateSettings
from specdec_exporter.commands.check import CheckSettings
from specdec_exporter.commands.demo import DemoSettings
from specdec_exporter.commands.flags import (
    FlagsOnly,
    add_settings_flags,
    default_text,
    settings_from_args,
)
from specdec_exporter.commands.load import LoadSettings
from specdec_exporter.commands.simulate import ServeFlags, SimulatorFlags
from specdec_exporter.commands.sweep import SweepSettings
from specdec_exporter.options import (
    ConfigError,
    FromEnv,
    Metavar,
    flag_of,
    given_as,
    refuse_together,
)
from specdec_exporter.sidecar.config import Settings, VllmTarget

TOKEN = "sk-flag-test-1234"
DOCS = Path(__file__).resolve().parents[2] / "docs"


class Example(FlagsOnly):
    token: Annotated[SecretStr | None, Metavar("KEY"), FromEnv("EXAMPLE_TOKEN")] = Field(
        None, description="a secret"
    )
    count: Annotated[int | None, Metavar("N")] = Field(None, ge=1, description="how many")
    seconds: float | None = Field(None, gt=0, description="how long")

    @model_validator(mode="after")
    def _one_bound(self) -> Self:
        refuse_together(self, "count", "seconds")
        return self


def parse(*argv: str) -> Example:
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, Example)
    return settings_from_args(Example, parser.parse_args(argv))


def test_metavars_and_the_environment_variable_show_in_help() -> None:
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, Example, "example flags")
    text = parser.format_help()
    assert "[--token KEY] [--count N] [--seconds NUMBER]" in text
    assert "example flags:" in text
    assert "a secret [env: EXAMPLE_TOKEN]" in " ".join(text.split())


def test_the_environment_fills_in_for_an_absent_flag_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse().token is None
    monkeypatch.setenv("EXAMPLE_TOKEN", "")
    assert parse().token is None
    monkeypatch.setenv("EXAMPLE_TOKEN", TOKEN)
    assert parse().token == SecretStr(TOKEN)
    assert parse("--token", "given").token == SecretStr("given")
    assert TOKEN not in repr(parse())


def test_flags_that_exclude_each_other_are_refused_together_only() -> None:
    assert (parse("--count", "2").count, parse("--seconds", "1").seconds) == (2, 1.0)
    with pytest.raises(ConfigError) as refused:
        parse("--count", "2", "--seconds", "1")
    assert str(refused.value) == "invalid setting: --seconds is not allowed with --count"


COMMAND_MODELS: list[tuple[str, tuple[type[BaseSettings], ...]]] = [
    ("run", (Settings,)),
    ("check", (VllmTarget, CheckSettings)),
    ("demo", (DemoSettings,)),
    ("simulate", (ServeFlags, SimulatorFlags)),
    ("load", (LoadSettings,)),
    ("sweep", (SweepSettings,)),
    ("calibrate", (CalibrateSettings,)),
]


def help_entries(command: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """Each flag's entry of ``command --help``, on one line (a wide terminal keeps each
    description on one line; a long flag puts it on the next)."""
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    entries: dict[str, str] = {}
    flag = ""
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  --"):
            flag = line.split()[0]
            entries[flag] = line.strip()
        elif line.startswith("   ") and flag:
            entries[flag] += " " + line.strip()
        else:
            flag = ""
    return entries


@pytest.mark.parametrize(("command", "models"), COMMAND_MODELS)
def test_help_names_every_field_with_its_help_and_default(
    command: str,
    models: tuple[type[BaseSettings], ...],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    entries = help_entries(command, capsys)
    fields = {name: field for model in models for name, field in model.model_fields.items()}
    for name, field in fields.items():
        switch_off = field.default is True
        flag = ("--no-" if switch_off else "--") + (field.alias or name).replace("_", "-")
        assert flag in entries, f"{command} --help lacks {flag}"
        assert " ".join((field.description or "").split()) in entries[flag]
        shown = None if switch_off else default_text(field.default)
        if shown is not None:
            assert f"(default: {shown})" in entries[flag]
    assert len(entries) == len(fields)


PYTHON_IN_HELP = re.compile(
    r"\b(int|float|str|Path|tuple|None|False|True)\b|\(default: \(|\(\)|\[[a-z]+,\.\.\.\]"
)


@pytest.mark.parametrize("command", [command for command, _ in COMMAND_MODELS])
def test_help_shows_no_python(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metavars and defaults for a person: not `tuple[float,...]`, `Path`, `(default: ())`."""
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert PYTHON_IN_HELP.findall(text) == []


def test_readable_metavars_and_defaults(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    for shown in (
        "[--vllm-url URL]",
        "[--listen HOST:PORT]",
        "[--calibration FILE]",
        "[--temperature-buckets LIST]",
        "[--generation-config PATH]",
        "[--max-models N]",
        "[--interval NUMBER]",
        "(default: 0.5,0.7,1.0)",
    ):
        assert shown in usage
    assert (default_text(None), default_text(False), default_text(())) == (None, None, None)
    assert (default_text((1, 8, 32)), default_text(2.0)) == ("1,8,32", "2.0")


@pytest.mark.parametrize(
    ("page", "model"), [("load.md", LoadSettings), ("sweep.md", SweepSettings)]
)
def test_the_pages_flag_table_shows_the_models_defaults(
    page: str, model: type[BaseSettings]
) -> None:
    """Each default the page's table quotes as a value (not `$VARIABLE` or `--flag`), read by
    the model, is its default."""
    text = (DOCS / page).read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(--[a-z-]+)[^`]*` \| `([^`$-][^`]*)` \|", text, re.M)
    names = {flag_of(model, name): name for name in model.model_fields}
    assert len(rows) >= 6
    for flag, quoted in rows:
        field = model.model_fields[names[flag]]
        value = getattr(model.model_validate({field.alias or names[flag]: quoted}), names[flag])
        assert value == field.default, f"{page}: {flag} {quoted}, model {field.default}"


def test_a_bad_setting_is_named_as_a_person_gives_it() -> None:
    """The flag, and the variable it falls back to: the model's prefix for a model that reads
    the environment, a FromEnv marker's variable, else none; an alias is the flag's name."""
    assert given_as(Settings)("interval") == "--interval (or SPECDEC_INTERVAL)"
    assert given_as(LoadSettings)("api_key") == "--api-key (or OPENAI_API_KEY)"
    assert given_as(LoadSettings)("concurrency") == "--concurrency"
    assert given_as(CheckSettings)("json") == "--json"
    assert given_as(CheckSettings)("not_a_field") == "not_a_field"
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, CalibrateSettings)
    with pytest.raises(ConfigError) as refused:  # an item of a list: told by its value
        settings_from_args(CalibrateSettings, parser.parse_args(["--concurrency", "1,x"]))
    assert str(refused.value) == (
        "invalid setting: --concurrency: Input should be a valid integer, unable to parse string "
        "as an integer (got 'x')"
    )

"""Settings: flags and SPECDEC_* variables, one-line errors, the generation config read at start-up,
and the README's configuration table generated from the same model."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from specdec_exporter.commands.flags import add_settings_flags, settings_from_args
from specdec_exporter.options import ConfigError
from specdec_exporter.sidecar.config import Settings, read_generation_config_temperature

README = Path(__file__).parents[2] / "README.md"


def settings_of(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, Settings)
    return settings_from_args(Settings, parser.parse_args(argv))


def error_of(*argv: str) -> str:
    with pytest.raises(ConfigError) as caught:
        settings_of(*argv)
    return str(caught.value)


def test_flags_win_over_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_INTERVAL", "3")
    monkeypatch.setenv("SPECDEC_WINDOW", "9")
    settings = settings_of("--interval", "2")
    assert (settings.interval, settings.window) == (2.0, 9.0)


def test_bucket_edges_from_a_flag_or_an_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert settings_of("--temperature-buckets", "0.3,0.6").temperature_buckets == (0.3, 0.6)
    monkeypatch.setenv("SPECDEC_TEMPERATURE_BUCKETS", "0.2,0.9")
    assert settings_of().temperature_buckets == (0.2, 0.9)


def test_error_messages_say_their_input_once() -> None:
    assert error_of("--vllm-url", "x") == (
        "invalid setting: --vllm-url (or SPECDEC_VLLM_URL): expected an http:// or https:// "
        "URL, got 'x'"
    )
    assert error_of("--interval", "-1") == (
        "invalid setting: --interval (or SPECDEC_INTERVAL): Input should be greater than or "
        "equal to 0.1 (got '-1')"
    )
    assert error_of("--temperature-buckets", "0.7,0.5") == (
        "invalid setting: --temperature-buckets (or SPECDEC_TEMPERATURE_BUCKETS): temperature "
        "bucket edges must be strictly increasing: (0.7, 0.5)"
    )


def test_generation_config_is_read_once_at_start_up(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6}')
    settings = settings_of("--generation-config", str(tmp_path))
    explicit = settings_of("--generation-config", str(tmp_path), "--default-temperature", "0")
    (tmp_path / "generation_config.json").unlink()
    assert settings.request_default_temperature == 0.6
    assert explicit.request_default_temperature == 0.0
    assert settings_of().request_default_temperature is None


def test_missing_generation_config_is_a_validation_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot read generation config"):
        Settings(generation_config=tmp_path / "missing.json")


def test_generation_config_file_and_folder(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "do_sample": True, "temperature": 0.6, "top_p": 0.9})
    )
    assert read_generation_config_temperature(tmp_path / "generation_config.json") == 0.6
    assert read_generation_config_temperature(tmp_path) == 0.6


@pytest.mark.parametrize(
    "document", [{"top_p": 0.9}, {"temperature": "hot"}, {"temperature": -1}, {"temperature": None}]
)
def test_generation_config_without_usable_temperature(tmp_path: Path, document: object) -> None:
    path = tmp_path / "generation_config.json"
    path.write_text(json.dumps(document))
    assert read_generation_config_temperature(path) is None


@pytest.mark.parametrize("text", ["{not json", "[0.6]"])
def test_generation_config_unreadable(tmp_path: Path, text: str) -> None:
    path = tmp_path / "generation_config.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="generation config"):
        read_generation_config_temperature(path)


def test_generation_config_missing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        read_generation_config_temperature(tmp_path / "nope.json")


def readme_configuration_rows() -> dict[str, tuple[str, str]]:
    """``--flag`` -> (environment variable, default cell) from the README's table."""
    text = README.read_text()
    table = text[text.index("## Configuration") : text.index("## Metrics")]
    rows = re.findall(r"^\| `(--[a-z-]+)` \| `(SPECDEC_[A-Z_]+)` \| ([^|]+) \|", table, re.M)
    return {flag: (env, default.strip()) for flag, env, default in rows}


def test_readme_configuration_table_matches_the_model() -> None:
    rows = readme_configuration_rows()
    assert sorted(rows) == sorted("--" + name.replace("_", "-") for name in Settings.model_fields)
    for name, field in Settings.model_fields.items():
        env, default = rows["--" + name.replace("_", "-")]
        assert env == f"SPECDEC_{name.upper()}"
        if field.default is None:
            assert not default.startswith("`"), f"{name}: unset by default, README says {default}"
        else:  # the README's value, read by the model, is the model's default
            value = Settings.model_validate({name: default.strip("`")}).model_dump()[name]
            assert value == field.default, f"{name}: README {default}, model {field.default}"

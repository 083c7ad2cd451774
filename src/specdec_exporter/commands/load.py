"""The ``specdec-exporter load`` command: flags to a LoadConfig, progress, then the summary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TextIO

from pydantic import BaseModel, Field, SecretStr

from specdec_exporter.commands.exits import EXIT_FAILED, EXIT_OK, UnreachableError
from specdec_exporter.commands.flags import FlagsOnly, add_settings_flags, settings_from_args
from specdec_exporter.devtools.load.config import (
    BUILTIN_PROMPTS,
    DEFAULT_MIX_TEXT,
    ClientOptions,
    LoadConfig,
    LoadOptions,
    MixText,
)
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.results import LoadResult
from specdec_exporter.devtools.load.runner import ModelLookupError, Progress, run_load
from specdec_exporter.devtools.load.summary import render_summary, summary_json, summary_rows
from specdec_exporter.options import ConfigError, FromEnv, Metavar
from specdec_exporter.term import LiveLine, drive, progress_bar, run_event_loop

EXIT_ALL_FAILED = EXIT_FAILED
SERVER = "the server"
"""How an unreachable --url is named: vLLM, the simulator or the sidecar's tap."""


class ClientFlags(FlagsOnly, ClientOptions):
    """The flags `load` and `sweep` share: where the requests go (ClientOptions), how they
    authenticate, which prompts they send, and how the result is shown."""

    api_key: Annotated[SecretStr | None, Metavar("KEY"), FromEnv("OPENAI_API_KEY")] = Field(
        None, description="sent as a Bearer token; never printed"
    )
    prompts: Annotated[Path | None, Metavar("FILE")] = Field(
        None, description="one prompt per line; unset: built-in short prompts"
    )
    as_json: bool = Field(
        False, alias="json", description="print one JSON object instead of the table"
    )
    quiet: bool = Field(False, description="no progress bar")

    def read_prompts(self) -> tuple[str, ...]:
        """The file's non-blank lines, or the built-in prompts; ConfigError when it has none."""
        if self.prompts is None:
            return BUILTIN_PROMPTS
        try:
            lines = self.prompts.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(
                f"--prompts: cannot read prompts file {self.prompts}: {exc.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(f"--prompts: prompts file {self.prompts} is not UTF-8 text") from None
        prompts = tuple(line for line in lines if line.strip())
        if not prompts:
            raise ConfigError(f"--prompts: prompts file {self.prompts} has no prompt")
        return prompts

    @property
    def bearer_token(self) -> str | None:
        return (self.api_key.get_secret_value() or None) if self.api_key else None

    def options(self, model: type[BaseModel]) -> dict[str, Any]:
        """The flags given that are fields of ``model`` (the flags left out keep the defaults
        the flag model and ``model`` share)."""
        return self.model_dump(include=set(model.model_fields), exclude_unset=True)


class LoadSettings(ClientFlags, LoadOptions):
    """load's flags: LoadOptions, the shared ClientFlags, and the temperature mix as text."""

    temperatures: MixText = Field(
        DEFAULT_MIX_TEXT,
        description="temperature:weight list, a single temperature, or 'default' to omit the key",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, LoadSettings)


def build_config(settings: LoadSettings) -> LoadConfig:
    return LoadConfig(
        **settings.options(LoadOptions),
        mix=parse_mix(settings.temperatures),
        prompts=settings.read_prompts(),
        api_key=settings.bearer_token,
    )


class ProgressLine(LiveLine):
    """The progress bar of a load run on one terminal line."""

    def __init__(
        self,
        stream: TextIO,
        config: LoadConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(stream, clock)
        self._config = config
        self._latest = Progress(0, 0, 0.0)

    def record(self, progress: Progress) -> None:
        """The runner's callback: keep the counts, redraw if the last draw is old enough."""
        self._latest = progress
        self.draw()

    def text(self, elapsed: float | None = None) -> str:
        elapsed = self._clock() - self._started if elapsed is None else elapsed
        done, errors = self._latest.done, self._latest.errors
        rate = f"{done / elapsed:.1f} req/s" if elapsed > 0 else "- req/s"
        if self._config.duration is not None:
            duration = max(1, round(self._config.duration))
            return progress_bar(
                min(int(elapsed), duration),
                duration,
                suffix=f"seconds  requests {done}  errors {errors}  {rate}",
            )
        return progress_bar(done, self._config.requests, suffix=f"errors {errors}  {rate}")


async def run_with_progress(config: LoadConfig, line: ProgressLine | None) -> LoadResult:
    """Run the load; with a progress line, redraw it on a timer too (slow requests, duration)."""
    return await drive(
        lambda on_progress: run_load(config, on_progress), line, line.record if line else None
    )


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(LoadSettings, args)
    config = build_config(settings)
    line = None if settings.quiet or not sys.stderr.isatty() else ProgressLine(sys.stderr, config)
    try:
        result = run_event_loop(run_with_progress(config, line))
    except ModelLookupError as exc:
        raise UnreachableError(config.url, str(exc), "--url", what=SERVER) from None
    rows = summary_rows(result)
    if settings.as_json:
        print(json.dumps(summary_json(result, rows), indent=2))
    else:
        print(render_summary(result, rows))
    return EXIT_OK if result.succeeded else EXIT_ALL_FAILED

"""The ``specdec-exporter load`` command: flags to a LoadConfig, progress, then the summary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Self, TextIO

from pydantic import AfterValidator, Field, SecretStr, model_validator
from pydantic_settings import CliToggleFlag

from specdec_exporter.commands.flags import (
    FlagsOnly,
    FromEnv,
    Metavar,
    add_settings_flags,
    refuse_together,
    settings_from_args,
)
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.report import render_summary, summary_json, summary_rows
from specdec_exporter.devtools.load.results import LoadResult
from specdec_exporter.devtools.load.runner import (
    BUILTIN_PROMPTS,
    DEFAULT_MIX_TEXT,
    Endpoint,
    LoadConfig,
    ModelLookupError,
    Progress,
    run_load,
)
from specdec_exporter.sidecar.config import ConfigError, HttpUrl
from specdec_exporter.term import LiveLine, drive, progress_bar, run_event_loop

EXIT_OK, EXIT_ALL_FAILED = 0, 1

Count = Annotated[int, Field(ge=1)]


def _check_mix(text: str) -> str:
    parse_mix(text)
    return text


class ClientFlags(FlagsOnly):
    """The flags `load` and `sweep` share: where the requests go, how they authenticate, what
    they ask for, and how the result is shown."""

    url: Annotated[HttpUrl, Metavar("URL")] = Field(
        "http://127.0.0.1:8000",
        description="base URL of the OpenAI-compatible server: vLLM, the simulator or the "
        "sidecar's request tap",
    )
    model: str | None = Field(
        None, description="model name; unset: the first id from GET /v1/models"
    )
    api_key: Annotated[SecretStr | None, Metavar("KEY"), FromEnv("OPENAI_API_KEY")] = Field(
        None, description="sent as a Bearer token; never printed"
    )
    max_tokens: Count = Field(64, description="max_tokens of every request")
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
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read prompts file {str(self.prompts)!r}: {exc.__class__.__name__}"
            ) from None
        prompts = tuple(line for line in lines if line.strip())
        if not prompts:
            raise ConfigError(f"prompts file {str(self.prompts)!r} has no prompt")
        return prompts

    @property
    def bearer_token(self) -> str | None:
        return (self.api_key.get_secret_value() or None) if self.api_key else None


class LoadSettings(ClientFlags):
    """load's flags."""

    endpoint: Endpoint = Field("chat", description="/v1/chat/completions or /v1/completions")
    timeout: float = Field(600.0, gt=0, description="timeout of one request, seconds")
    concurrency: Count = Field(8, description="requests in flight at once")
    requests: Count = Field(100, description="send this many requests, then stop")
    duration: float | None = Field(
        None,
        gt=0,
        description="instead of --requests: start requests for this many seconds; those in "
        "flight then finish",
    )
    temperatures: Annotated[str, AfterValidator(_check_mix), Metavar("MIX")] = Field(
        DEFAULT_MIX_TEXT,
        description="temperature:weight list, a single temperature, or 'default' to omit the key",
    )
    stream_share: float = Field(
        0.0, ge=0.0, le=1.0, description="share 0..1 of requests sent with stream: true"
    )
    include_usage: CliToggleFlag[bool] = Field(
        True,
        description="ask streams for stream_options.include_usage; --no-include-usage does not",
    )
    seed: int | None = Field(
        None, description="seed of the temperature, stream and prompt choices; unset: random"
    )

    @model_validator(mode="after")
    def _one_bound(self) -> Self:
        refuse_together(self, "requests", "duration")
        return self


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, LoadSettings)


def build_config(settings: LoadSettings) -> LoadConfig:
    return LoadConfig(
        url=settings.url,
        model=settings.model,
        concurrency=settings.concurrency,
        requests=None if settings.duration is not None else settings.requests,
        duration=settings.duration,
        mix=parse_mix(settings.temperatures),
        stream_share=settings.stream_share,
        include_usage=settings.include_usage,
        max_tokens=settings.max_tokens,
        endpoint=settings.endpoint,
        prompts=settings.read_prompts(),
        seed=settings.seed,
        api_key=settings.bearer_token,
        timeout=settings.timeout,
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
        return progress_bar(done, self._config.requests or 0, suffix=f"errors {errors}  {rate}")


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
        print(f"specdec-exporter load: {exc}", file=sys.stderr)
        return EXIT_ALL_FAILED
    rows = summary_rows(result)
    if settings.as_json:
        print(json.dumps(summary_json(result, rows), indent=2))
    else:
        print(render_summary(result, rows))
    return EXIT_OK if result.succeeded else EXIT_ALL_FAILED

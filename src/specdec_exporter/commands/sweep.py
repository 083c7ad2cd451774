"""The ``specdec-exporter sweep`` command: flags to a SweepConfig, progress, then the report."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Self, TextIO

from pydantic import Field, model_validator

from specdec_exporter.commands.exits import EXIT_FAILED, EXIT_OK, UnreachableError
from specdec_exporter.commands.flags import add_settings_flags, settings_from_args
from specdec_exporter.commands.load import SERVER, ClientFlags
from specdec_exporter.devtools.load.config import TemperatureListText
from specdec_exporter.devtools.load.mix import parse_temperatures, temperature_label
from specdec_exporter.devtools.load.runner import ModelLookupError
from specdec_exporter.devtools.sweep.config import (
    DEFAULT_TEMPERATURES_TEXT,
    SweepConfig,
    SweepOptions,
)
from specdec_exporter.devtools.sweep.runner import SweepError, SweepProgress, SweepResult, run_sweep
from specdec_exporter.devtools.sweep.table import render_sweep, sweep_csv, sweep_json
from specdec_exporter.options import Seed, redact_url, refuse_together
from specdec_exporter.term import LiveLine, drive, progress_bar, run_event_loop

PROG = "specdec-exporter sweep"


class SweepSettings(ClientFlags, SweepOptions):
    """sweep's flags: SweepOptions, the shared ClientFlags, the temperature list as text, and the
    seed and output format."""

    temperatures: TemperatureListText = Field(
        DEFAULT_TEMPERATURES_TEXT,
        description="comma-separated temperatures, run in this order; 'default' omits the key",
    )
    seed: Seed | None = Field(
        None,
        description="seed of the prompt choice, the same for every temperature; unset: random, "
        "printed",
    )
    csv: bool = Field(False, description="print CSV, one line per temperature")

    @model_validator(mode="after")
    def _one_format(self) -> Self:
        refuse_together(self, "as_json", "csv")
        return self


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, SweepSettings)


def build_config(settings: SweepSettings) -> SweepConfig:
    return SweepConfig(
        **settings.options(SweepOptions),
        temperatures=parse_temperatures(settings.temperatures),
        prompts=settings.read_prompts(),
        seed=random.randrange(1 << 31) if settings.seed is None else settings.seed,
        api_key=settings.bearer_token,
    )


class SweepProgressLine(LiveLine):
    """The progress bar over the whole sweep on one terminal line."""

    def __init__(
        self, stream: TextIO, config: SweepConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(stream, clock)
        self._config = config
        self._latest = SweepProgress(0, temperature_label(config.temperatures[0]), 0, 0)

    def record(self, progress: SweepProgress) -> None:
        self._latest = progress
        self.draw(force=progress.settling)

    def text(self) -> str:
        latest = self._latest
        phases = len(self._config.temperatures)
        state = "waiting for counters" if latest.settling else f"errors {latest.errors}"
        suffix = f"T={latest.label} ({latest.phase + 1}/{phases})  {state}"
        return progress_bar(latest.done, self._config.total_requests, suffix=suffix)


async def sweep_with_progress(config: SweepConfig, line: SweepProgressLine | None) -> SweepResult:
    """Run the sweep; with a progress line, also redraw it on a timer (slow requests)."""
    return await drive(
        lambda on_progress: run_sweep(config, on_progress), line, line.record if line else None
    )


def render(result: SweepResult, config: SweepConfig, settings: SweepSettings) -> str:
    if settings.as_json:
        return json.dumps(sweep_json(result, config), indent=2)
    if settings.csv:
        return sweep_csv(result).rstrip("\n")
    return render_sweep(result, config)


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(SweepSettings, args)
    config = build_config(settings)
    show_progress = not settings.quiet and sys.stderr.isatty()
    line = SweepProgressLine(sys.stderr, config) if show_progress else None
    try:
        result = run_event_loop(sweep_with_progress(config, line))
    except ModelLookupError as exc:
        raise UnreachableError(config.url, str(exc), "--url", what=SERVER) from None
    except SweepError as exc:
        flag = "--url" if config.metrics_url is None else "--metrics-url"
        raise UnreachableError(config.metrics_base_url, str(exc), flag) from None
    print(redact_url(render(result, config, settings)))
    return EXIT_OK if all(row.succeeded for row in result.rows) else EXIT_FAILED

"""The ``specdec-exporter sweep`` command: flags to a SweepConfig, progress, then the report."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from specdec_exporter.commands.load import API_KEY_ENV, read_prompts
from specdec_exporter.devtools.load.mix import temperature_label
from specdec_exporter.devtools.load.runner import ModelLookupError
from specdec_exporter.devtools.sweep.config import (
    DEFAULT_TEMPERATURES_TEXT,
    SOURCE_CHOICES,
    SweepConfig,
    TemperatureListError,
    parse_temperatures,
)
from specdec_exporter.devtools.sweep.report import render_sweep, sweep_csv, sweep_json
from specdec_exporter.devtools.sweep.runner import SweepError, SweepProgress, SweepResult, run_sweep
from specdec_exporter.sidecar.config import ConfigError
from specdec_exporter.term import LiveLine, drive, progress_bar, run_event_loop

EXIT_OK, EXIT_FAILED = 0, 1
PROG = "specdec-exporter sweep"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _temperatures(text: str) -> tuple[float | None, ...]:
    try:
        return parse_temperatures(text)
    except TemperatureListError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8000",
        help="base URL of the OpenAI-compatible server, vLLM or the sidecar's "
        "request tap (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-url",
        metavar="URL",
        help="base URL whose /metrics has vLLM's counters (default: --url)",
    )
    parser.add_argument("--model", help="model name (default: first id from GET /v1/models)")
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"sent as a Bearer token (default: ${API_KEY_ENV}); never printed",
    )
    parser.add_argument(
        "--temperatures",
        type=_temperatures,
        default=DEFAULT_TEMPERATURES_TEXT,
        metavar="LIST",
        help="comma-separated temperatures, run in this order; "
        "'default' omits the key (default: %(default)s)",
    )
    parser.add_argument(
        "--requests",
        type=_positive_int,
        default=20,
        metavar="N",
        help="requests per temperature (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="requests in flight at once (default: %(default)s)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_positive_int,
        default=64,
        metavar="N",
        help="max_tokens of every request (default: %(default)s)",
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="stream every request (with include_usage); needed for TTFT/TPOT",
    )
    parser.add_argument(
        "--prompts",
        type=Path,
        metavar="FILE",
        help="one prompt per line (default: built-in short prompts)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="seed of the prompt choice, the same for every temperature (default: random, printed)",
    )
    parser.add_argument(
        "--source",
        choices=SOURCE_CHOICES,
        default="auto",
        help="where acceptance comes from; auto: per-request if every successful "
        "request of the first phase carried metrics, else counters",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.add_argument("--csv", action="store_true", help="print CSV, one line per temperature")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def build_config(args: argparse.Namespace) -> SweepConfig:
    for flag, url in (("--url", args.url), ("--metrics-url", args.metrics_url)):
        if url is not None and not url.startswith(("http://", "https://")):
            raise ConfigError(f"{flag} must start with http:// or https://, got {url!r}")
    return SweepConfig(
        url=args.url,
        metrics_url=args.metrics_url,
        model=args.model,
        temperatures=args.temperatures,
        requests=args.requests,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        stream=args.stream,
        prompts=read_prompts(args.prompts),
        seed=random.randrange(1 << 31) if args.seed is None else args.seed,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        source=args.source,
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


def render(result: SweepResult, config: SweepConfig, args: argparse.Namespace) -> str:
    if args.json:
        return json.dumps(sweep_json(result, config), indent=2)
    if args.csv:
        return sweep_csv(result).rstrip("\n")
    return render_sweep(result, config)


def main(args: argparse.Namespace) -> int:
    config = build_config(args)
    show_progress = not args.quiet and sys.stderr.isatty()
    line = SweepProgressLine(sys.stderr, config) if show_progress else None
    try:
        result = run_event_loop(sweep_with_progress(config, line))
    except (ModelLookupError, SweepError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(render(result, config, args))
    return EXIT_OK if all(row.succeeded for row in result.rows) else EXIT_FAILED

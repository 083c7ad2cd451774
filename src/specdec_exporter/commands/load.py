"""The ``specdec-exporter load`` command: flags to a LoadConfig, progress, then the summary."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from specdec_exporter.devtools.load.mix import MixEntry, MixError, parse_mix
from specdec_exporter.devtools.load.report import render_summary, summary_json, summary_rows
from specdec_exporter.devtools.load.results import LoadResult
from specdec_exporter.devtools.load.runner import (
    BUILTIN_PROMPTS,
    DEFAULT_MIX_TEXT,
    LoadConfig,
    ModelLookupError,
    Progress,
    run_load,
)
from specdec_exporter.sidecar.config import ConfigError
from specdec_exporter.term import LiveLine, drive, progress_bar, run_event_loop

API_KEY_ENV = "OPENAI_API_KEY"
EXIT_OK, EXIT_ALL_FAILED = 0, 1
DEFAULT_REQUESTS = 100


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0..1, got {text}")
    return value


def _mix(text: str) -> tuple[MixEntry, ...]:
    try:
        return parse_mix(text)
    except MixError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def configure(parser: argparse.ArgumentParser) -> None:
    add_target_flags(parser)
    add_traffic_flags(parser)
    add_output_flags(parser)


def add_target_flags(parser: argparse.ArgumentParser) -> None:
    """Where the load goes and how it authenticates."""
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8000",
        help="base URL of the OpenAI-compatible server (default: %(default)s)",
    )
    parser.add_argument("--model", help="model name (default: first id from GET /v1/models)")
    parser.add_argument(
        "--endpoint",
        choices=("chat", "completions"),
        default="chat",
        help="/v1/chat/completions or /v1/completions (default: %(default)s)",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"sent as a Bearer token (default: ${API_KEY_ENV}); never printed",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=600.0,
        metavar="SECONDS",
        help="timeout of one request (default: %(default)s)",
    )


def add_traffic_flags(parser: argparse.ArgumentParser) -> None:
    """How much load, and what each request looks like."""
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=8,
        metavar="N",
        help="requests in flight at once (default: %(default)s)",
    )
    bound = parser.add_mutually_exclusive_group()
    bound.add_argument(
        "--requests",
        type=_positive_int,
        metavar="N",
        help=f"send N requests, then stop (default: {DEFAULT_REQUESTS})",
    )
    bound.add_argument(
        "--duration",
        type=_positive_float,
        metavar="SECONDS",
        help="start requests for SECONDS; those in flight then finish",
    )
    parser.add_argument(
        "--temperatures",
        type=_mix,
        default=DEFAULT_MIX_TEXT,
        metavar="MIX",
        help="temperature:weight list, a single temperature, or 'default' to "
        "omit the key (default: %(default)s)",
    )
    parser.add_argument(
        "--stream-share",
        type=_share,
        default=0.0,
        metavar="SHARE",
        help="share 0..1 of requests sent with stream: true (default: 0)",
    )
    parser.add_argument(
        "--no-include-usage",
        action="store_true",
        help="do not ask streams for stream_options.include_usage",
    )
    parser.add_argument(
        "--max-tokens",
        type=_positive_int,
        default=64,
        metavar="N",
        help="max_tokens of every request (default: %(default)s)",
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
        help="seed of the temperature, stream and prompt choices (default: random)",
    )


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object instead of the table",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def read_prompts(path: Path | None) -> tuple[str, ...]:
    if path is None:
        return BUILTIN_PROMPTS
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read prompts file {str(path)!r}: {exc.__class__.__name__}"
        ) from None
    prompts = tuple(line for line in lines if line.strip())
    if not prompts:
        raise ConfigError(f"prompts file {str(path)!r} has no prompt")
    return prompts


def build_config(args: argparse.Namespace) -> LoadConfig:
    if not args.url.startswith(("http://", "https://")):
        raise ConfigError(f"--url must start with http:// or https://, got {args.url!r}")
    requests = None if args.duration is not None else (args.requests or DEFAULT_REQUESTS)
    return LoadConfig(
        url=args.url,
        model=args.model,
        concurrency=args.concurrency,
        requests=requests,
        duration=args.duration,
        mix=args.temperatures,
        stream_share=args.stream_share,
        include_usage=not args.no_include_usage,
        max_tokens=args.max_tokens,
        endpoint=args.endpoint,
        prompts=read_prompts(args.prompts),
        seed=args.seed,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        timeout=args.timeout,
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
    config = build_config(args)
    line = None if args.quiet or not sys.stderr.isatty() else ProgressLine(sys.stderr, config)
    try:
        result = run_event_loop(run_with_progress(config, line))
    except ModelLookupError as exc:
        print(f"specdec-exporter load: {exc}", file=sys.stderr)
        return EXIT_ALL_FAILED
    rows = summary_rows(result)
    if args.json:
        print(json.dumps(summary_json(result, rows), indent=2))
    else:
        print(render_summary(result, rows))
    return EXIT_OK if result.succeeded else EXIT_ALL_FAILED

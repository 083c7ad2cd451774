"""The `calibrate` command: measure speculation's real speedup and fit the draft cost ratio c."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from pydantic import ValidationError

from specdec_exporter.commands.flags import describe_validation_error
from specdec_exporter.core.calibration import Calibration, CalibrationError, build_calibration
from specdec_exporter.devtools.calibrate import (
    CalibrateConfig,
    CalibrateError,
    CalibrationRun,
    run_calibration,
)
from specdec_exporter.devtools.load.mix import MixError, parse_mix, temperature_label
from specdec_exporter.sidecar.config import ConfigError, VllmTarget
from specdec_exporter.term import render_table, run_event_loop

EXIT_NO_FIT = 1
EXIT_UNREACHABLE = 3
CONFIG_BEGIN = "# >>> measured by `specdec-exporter calibrate --write-config`: rerun it to update"
CONFIG_END = "# <<< calibrate"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spec-url",
        action="append",
        default=[],
        metavar="URL",
        help="a vLLM with --speculative-config; once per k to propose a per-batch-size schedule",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="a vLLM serving the same model without --speculative-config",
    )
    parser.add_argument(
        "--concurrency", default="1,8,32", help="client concurrencies to measure (default 1,8,32)"
    )
    parser.add_argument(
        "--temperatures",
        default="0,0.7,1.0",
        help="temperatures to measure; 'default' omits the key (default 0,0.7,1.0)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="requests per phase (default four rounds of the concurrency, >= 8)",
    )
    parser.add_argument("--max-tokens", type=int, default=128, help="per request (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="the load's seed (default 0)")
    parser.add_argument("--model", help="model name to send (default: from /v1/models)")
    parser.add_argument(
        "--warmup", type=int, default=4, help="unmeasured requests per server first (default 4)"
    )
    parser.add_argument(
        "--tpot-source",
        choices=["client", "server"],
        default="client",
        help="client: as streamed to this client (default); server: vLLM's "
        "metrics.mean_itl_ms (needs --enable-per-request-metrics)",
    )
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=0.25,
        help="seconds between samples of num_requests_running (default 0.25)",
    )
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=10.0,
        help="seconds to wait for vLLM's counters after a phase (default 10)",
    )
    parser.add_argument(
        "--draft-cost-ratio",
        metavar="C",
        help="the c run/check would assume, for the modelled speedup column "
        "(as theirs: env SPECDEC_DRAFT_COST_RATIO; default by method)",
    )
    parser.add_argument(
        "--speculative-method",
        metavar="METHOD",
        help="vLLM's speculative method, picks that c's default (env SPECDEC_SPECULATIVE_METHOD)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (the file run/check take as --calibration)",
    )
    parser.add_argument(
        "--write-config",
        type=Path,
        metavar="PATH",
        help="write the measured break-even per model into this alerts/config.toml",
    )


def parse_concurrencies(text: str) -> tuple[int, ...]:
    try:
        values = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise ConfigError(f"--concurrency: not a list of integers: {text!r}") from None
    if not values or values[0] < 1:
        raise ConfigError(f"--concurrency: every entry must be >= 1: {text!r}")
    return tuple(values)


def parse_temperatures(text: str) -> tuple[float | None, ...]:
    """``0,0.7,1.0`` in the order given; ``default`` omits the key. No weights: every
    temperature is a phase of its own."""
    if ":" in text:
        raise ConfigError(f"--temperatures: a list of temperatures, without weights: {text!r}")
    try:
        return tuple(entry.temperature for entry in parse_mix(text))
    except MixError as exc:
        raise ConfigError(f"--temperatures: {exc}") from None


def build_config(args: argparse.Namespace) -> CalibrateConfig:
    """The run's config; a bad flag raises ConfigError (one line, exit 64)."""
    if not args.spec_url or args.base_url is None:
        raise ConfigError(
            "give --spec-url (a vLLM with speculation, once per k) and --base-url "
            "(the same model without)"
        )
    for flag, url in (
        *(("--spec-url", url) for url in args.spec_url),
        ("--base-url", args.base_url),
    ):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{flag} must start with http:// or https://, got {url!r}")
    try:
        return CalibrateConfig(
            spec_urls=tuple(args.spec_url),
            base_url=args.base_url,
            concurrencies=parse_concurrencies(args.concurrency),
            temperatures=parse_temperatures(args.temperatures),
            requests=args.requests,
            max_tokens=args.max_tokens,
            seed=args.seed,
            model=args.model,
            tpot_source=args.tpot_source,
            warmup=args.warmup,
            sample_interval=args.sample_interval,
            settle_timeout=args.settle_timeout,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def assumed_cost_ratio(args: argparse.Namespace) -> float:
    """The c run/check would use without a calibration, validated by their settings model."""
    given = {
        "draft_cost_ratio": args.draft_cost_ratio,
        "speculative_method": args.speculative_method,
    }
    try:
        target = VllmTarget(**{key: value for key, value in given.items() if value is not None})
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    return target.draft_cost.ratio


def main(args: argparse.Namespace) -> int:
    assumed = assumed_cost_ratio(args)
    config = build_config(args)

    def say(line: str) -> None:
        print(f"calibrate: {line}", file=sys.stderr, flush=True)

    try:
        run = run_event_loop(run_calibration(config, assumed, say))
    except CalibrateError as exc:
        print(f"specdec-exporter calibrate: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    try:
        calibration = build_calibration(
            run.model, run.points, tpot_source=config.tpot_source, assumed_cost_ratio=assumed
        )
    except CalibrationError as exc:
        print(f"specdec-exporter calibrate: {exc}", file=sys.stderr)
        return EXIT_NO_FIT
    print(calibration.model_dump_json(indent=2) if args.json else as_text(run, calibration))
    if args.write_config is not None:
        return _write(args.write_config, calibration)
    return 0


def as_text(run: CalibrationRun, calibration: Calibration) -> str:
    headers = (
        "k",
        "concurrency",
        "temperature",
        "running spec",
        "running base",
        "acceptance",
        "mean len",
        "TPOT spec ms",
        "TPOT base ms",
        "measured speedup",
        "modelled speedup*",
        "fitted c",
    )
    rows = [
        (
            p.num_speculative_tokens,
            p.concurrency,
            temperature_label(p.temperature),
            p.num_requests_running_spec,
            p.num_requests_running_base,
            p.acceptance_rate,
            p.mean_acceptance_length,
            p.tpot_spec_ms,
            p.tpot_base_ms,
            p.measured_speedup,
            p.modelled_speedup,
            p.draft_cost_ratio,
        )
        for p in calibration.points
    ]
    fits = [
        (
            f.concurrency,
            f.num_requests_running_spec,
            f.num_requests_running_base,
            f.draft_cost_ratio,
            f.break_even_acceptance_rate,
        )
        for f in calibration.concurrency_fits
    ]
    servers = ", ".join(f"{s.url} ({'plain' if s.k is None else f'k={s.k}'})" for s in run.servers)
    lines = [
        f"model {calibration.model_name}; servers {servers}; TPOT from the "
        f"{calibration.tpot_source}",
        "",
        render_table(headers, rows),
        "",
        render_table(
            ("concurrency", "running spec", "running base", "c", "break-even acceptance"), fits
        ),
        "",
        f"draft cost ratio c = {calibration.draft_cost_ratio:.3f} (concurrency "
        f"{calibration.draft_cost_ratio_concurrency}, the highest measured); the sidecar "
        f"assumed {calibration.assumed_draft_cost_ratio:g}",
        "* modelled with the assumed c: L / (1 + k*c); measured = TPOT base / TPOT spec",
        "running: vLLM's num_requests_running, mean over the phase (client concurrency "
        "is not vLLM's batch size)",
    ]
    if calibration.schedule is not None:
        lines += [
            "",
            "per-batch-size k (merge into --speculative-config; 0: plain decoding):",
            calibration.schedule.snippet(),
        ]
    lines.append("use: --json > calibration.json, then run/check --calibration calibration.json")
    return "\n".join(lines)


class WriteConfigError(ValueError):
    """The break-even cannot be written; the message says why."""


def write_alerts_config(path: Path, calibration: Calibration) -> str:
    """Write the measured break-even per model into its own table of an alerts/config.toml.

    The table sits between two marker comments and replaces what a previous run wrote there;
    nothing else in the file changes. Returns the block written."""
    never = {
        model: entry.break_even_acceptance_rate
        for model, entry in calibration.models.items()
        if entry.break_even_acceptance_rate > 1
    }
    if never:
        raise WriteConfigError(
            f"break-even above 1 for {never}: speculation never pays at any "
            "acceptance here; disable it instead of alerting on it"
        )
    lines = [
        CONFIG_BEGIN,
        f"# c fitted at client concurrency {calibration.draft_cost_ratio_concurrency}, "
        f"k = {calibration.num_speculative_tokens}, TPOT from the {calibration.tpot_source}",
    ]
    for model, entry in sorted(calibration.models.items()):
        lines += [
            f"[calibration.models.{json.dumps(model)}]",
            f"break_even_acceptance_rate = {round(entry.break_even_acceptance_rate, 4)!r}",
            f"draft_cost_ratio = {round(entry.draft_cost_ratio, 4)!r}",
        ]
    block = "\n".join([*lines, CONFIG_END]) + "\n"
    text = path.read_text()
    start, end = text.find(CONFIG_BEGIN), text.find(CONFIG_END)
    if 0 <= start < end:
        text = text[:start] + block + text[end + len(CONFIG_END) :].lstrip("\n")
    elif "[calibration" in text:
        raise WriteConfigError(f"{path} has a [calibration] table not written by calibrate")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    tomllib.loads(text)
    path.write_text(text)
    return block


def _write(path: Path, calibration: Calibration) -> int:
    try:
        block = write_alerts_config(path, calibration)
    except (OSError, WriteConfigError) as exc:
        print(f"specdec-exporter calibrate: --write-config not written: {exc}", file=sys.stderr)
        return EXIT_NO_FIT
    print(f"calibrate: wrote into {path}:\n{block}", file=sys.stderr)
    return 0

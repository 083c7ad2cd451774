"""The `calibrate` command: measure speculation's real speedup and fit the draft cost ratio c."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Self

from pydantic import Field, ValidationError, model_validator

from specdec_exporter.commands.exits import EXIT_FAILED, EXIT_UNREACHABLE, UnreachableError
from specdec_exporter.commands.flags import FlagsOnly, add_settings_flags, settings_from_args
from specdec_exporter.core.calibration import Calibration, CalibrationError, build_calibration
from specdec_exporter.devtools.calibrate.runner import (
    DEFAULT_TEMPERATURES_TEXT,
    CalibrateConfig,
    CalibrateError,
    CalibrateOptions,
    CalibrationRun,
    ServerUnreachableError,
    run_calibration,
)
from specdec_exporter.devtools.load.config import TemperatureListText
from specdec_exporter.devtools.load.mix import parse_temperatures, temperature_label
from specdec_exporter.options import (
    ConfigError,
    HttpUrl,
    Metavar,
    describe_validation_error,
    given_as,
    redact_url,
)
from specdec_exporter.sidecar.config import VllmTarget
from specdec_exporter.term import render_table, run_event_loop

EXIT_NO_FIT = EXIT_FAILED
CONFIG_BEGIN = "# >>> measured by `specdec-exporter calibrate --write-config`: rerun it to update"
CONFIG_END = "# <<< calibrate"


class CalibrateSettings(FlagsOnly, CalibrateOptions):
    """calibrate's flags: CalibrateOptions, the servers, the temperature list as text, the c
    to compare with, and the output."""

    spec_url: Annotated[tuple[HttpUrl, ...], Metavar("URL")] = Field(
        (),
        description="base URL (with or without /v1) of a vLLM with --speculative-config; once "
        "per k to propose a per-batch-size schedule",
    )
    base_url: Annotated[HttpUrl | None, Metavar("URL")] = Field(
        None,
        description="base URL (with or without /v1) of a vLLM serving the same model without "
        "--speculative-config",
    )
    temperatures: TemperatureListText = Field(
        DEFAULT_TEMPERATURES_TEXT,
        description="comma-separated temperatures to measure; 'default' omits the key",
    )
    draft_cost_ratio: Annotated[float | None, Metavar("C")] = Field(
        None,
        description="c as run/check would assume it, for the modelled speedup column; unset: "
        "$SPECDEC_DRAFT_COST_RATIO, else the method's default",
    )
    speculative_method: Annotated[str | None, Metavar("METHOD")] = Field(
        None,
        description="vLLM's speculative method, which picks c's default; unset: "
        "$SPECDEC_SPECULATIVE_METHOD",
    )
    as_json: bool = Field(
        False,
        alias="json",
        description="print one JSON object (the file run/check take as --calibration)",
    )
    write_config: Annotated[Path | None, Metavar("PATH")] = Field(
        None, description="write the measured break-even per model into this alerts/config.toml"
    )

    @model_validator(mode="after")
    def _both_servers(self) -> Self:
        if not self.spec_url or self.base_url is None:
            raise ValueError(
                "give --spec-url (a vLLM with speculation, once per k) and --base-url "
                "(the same model without)"
            )
        return self


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, CalibrateSettings)


def build_config(settings: CalibrateSettings) -> CalibrateConfig:
    assert settings.base_url is not None  # checked by CalibrateSettings
    return CalibrateConfig(
        **settings.model_dump(
            include=set(CalibrateOptions.model_fields), exclude_unset=True, by_alias=True
        ),
        spec_urls=settings.spec_url,
        base_url=settings.base_url,
        temperatures=parse_temperatures(settings.temperatures),
    )


def assumed_cost_ratio(settings: CalibrateSettings) -> float:
    """The c run/check would use without a calibration, validated by their settings model (which
    reads their SPECDEC_* variables for what is not given here)."""
    given = settings.model_dump(
        include={"draft_cost_ratio", "speculative_method"}, exclude_none=True
    )
    try:
        target = VllmTarget(**given)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, given_as(VllmTarget))) from None
    return target.draft_cost.ratio


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(CalibrateSettings, args)
    assumed = assumed_cost_ratio(settings)
    config = build_config(settings)

    def say(line: str) -> None:
        print(f"calibrate: {redact_url(line)}", file=sys.stderr, flush=True)

    try:
        run = run_event_loop(run_calibration(config, assumed, say))
    except ServerUnreachableError as exc:
        flag = "--spec-url" if exc.url in config.spec_urls else "--base-url"
        raise UnreachableError(exc.url, exc.detail, flag) from None
    except CalibrateError as exc:
        print(f"specdec-exporter calibrate: {redact_url(str(exc))}", file=sys.stderr)
        return EXIT_UNREACHABLE
    try:
        calibration = build_calibration(
            run.model, run.points, tpot_source=config.tpot_source, assumed_cost_ratio=assumed
        )
    except CalibrationError as exc:
        print(f"specdec-exporter calibrate: {exc}", file=sys.stderr)
        return EXIT_NO_FIT
    shown = calibration.model_dump_json(indent=2) if settings.as_json else as_text(run, calibration)
    print(redact_url(shown))
    if settings.write_config is not None:
        return _write(settings.write_config, calibration)
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

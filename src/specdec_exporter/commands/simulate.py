"""`specdec-exporter simulate`: serve a simulated `vllm serve` 0.33 with speculative decoding."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Annotated

from pydantic import Field

from specdec_exporter.commands.flags import FlagsOnly, add_settings_flags, settings_from_args
from specdec_exporter.devtools.sim.server import serve
from specdec_exporter.devtools.sim.settings import (
    Port,
    ServeOptions,
    SimConfig,
    SimulatorOptions,
    Temperature,
    default_of,
    parse_default_temperature,
    parse_speculative_config,
)
from specdec_exporter.options import ConfigError, Metavar

VLLM_SERVE_PORT = 8000


class ServeFlags(FlagsOnly, ServeOptions):
    """`vllm serve`'s flags that the simulator honours, with vllm serve's port."""

    port: Port = Field(VLLM_SERVE_PORT, description="port, vllm serve's; 0 lets the OS choose")
    speculative_config: Annotated[str | None, Metavar("JSON")] = Field(
        None,
        description='e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'; also '
        "num_speculative_tokens_per_batch_size: [[lo, hi, K], ...]; unset: speculative "
        "decoding off",
    )
    generation_config: Annotated[Path | None, Metavar("DIR")] = Field(
        None, description="folder whose generation_config.json sets the default temperature"
    )
    override_generation_config: Annotated[str | None, Metavar("JSON")] = Field(
        None, description="e.g. '{\"temperature\": 0.6}'; wins over --generation-config"
    )


class SimulatorFlags(FlagsOnly, SimulatorOptions):
    """The simulator's own flags."""

    default_temperature: Temperature | None = Field(
        None,
        description="temperature when a request has none; wins over the generation config "
        f"(unset: the generation config's, else {default_of('default_temperature')})",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, ServeFlags, "vllm serve flags")
    add_settings_flags(parser, SimulatorFlags, "simulator flags")


def build_config(args: argparse.Namespace) -> SimConfig:
    vllm = settings_from_args(ServeFlags, args)
    sim = settings_from_args(SimulatorFlags, args)
    temperature = parse_default_temperature(
        sim.default_temperature,
        vllm.override_generation_config,
        _read_generation_config(vllm.generation_config),
    )
    return SimConfig(
        **vllm.model_dump(include=set(ServeOptions.model_fields)),
        **sim.model_dump(include=set(SimulatorOptions.model_fields)),
        speculative=parse_speculative_config(vllm.speculative_config),
        default_temperature=temperature,
    )


def _read_generation_config(folder: Path | None) -> str | None:
    if folder is None:
        return None
    path = folder / "generation_config.json"
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"--generation-config: cannot read {path}: {exc.strerror}") from None


def describe(config: SimConfig) -> str:
    spec = config.speculative
    drafting = (
        "speculative decoding off"
        if spec is None
        else (
            f"{spec.method}, k={spec.num_speculative_tokens}, "
            f"drafter quality {config.drafter_quality}"
        )
    )
    return (
        f"model {config.served_model_name}; {drafting}; "
        f"{config.data_parallel_size} engine(s), speed x{config.speed:g}"
    )


def main(args: argparse.Namespace) -> int:
    config = build_config(args)

    def announce(url: str) -> None:
        print(f"simulated vLLM 0.33.0 at {url} ({describe(config)})", file=sys.stderr, flush=True)

    serve(config, announce)
    return 0

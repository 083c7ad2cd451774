"""`specdec-exporter simulate`: serve a simulated `vllm serve` 0.33 with speculative decoding."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import get_args

from specdec_exporter.devtools.sim.server import serve
from specdec_exporter.devtools.sim.settings import (
    MetricNames,
    SimConfig,
    SpecMetricsMode,
    default_of,
    parse_default_temperature,
    parse_speculative_config,
)
from specdec_exporter.sidecar.config import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    vllm = parser.add_argument_group("vllm serve flags")
    vllm.add_argument(
        "--host", default=default_of("host"), help="address to bind (default %(default)s)"
    )
    vllm.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any)")
    vllm.add_argument(
        "--served-model-name", default=default_of("served_model_name"), metavar="NAME"
    )
    vllm.add_argument(
        "--speculative-config",
        metavar="JSON",
        help='e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'; '
        "also num_speculative_tokens_per_batch_size: [[lo, hi, K], ...]; "
        "absent: speculative decoding off",
    )
    vllm.add_argument(
        "--per-request-spec-decode-metrics",
        default=default_of("per_request_spec_decode_metrics"),
        choices=get_args(SpecMetricsMode),
    )
    vllm.add_argument(
        "--enable-per-request-metrics",
        action="store_true",
        help="also return timing metrics per request",
    )
    vllm.add_argument("--enable-force-include-usage", action="store_true")
    vllm.add_argument(
        "--data-parallel-size", type=int, default=default_of("data_parallel_size"), metavar="N"
    )
    vllm.add_argument(
        "--api-server-count",
        type=int,
        default=None,
        metavar="N",
        help="> 1 renders /metrics multiprocess-style (default: the DP size)",
    )
    vllm.add_argument("--max-num-seqs", type=int, default=default_of("max_num_seqs"))
    vllm.add_argument("--max-model-len", type=int, default=default_of("max_model_len"))
    vllm.add_argument(
        "--generation-config",
        metavar="DIR",
        help="folder whose generation_config.json sets the default temperature",
    )
    vllm.add_argument(
        "--override-generation-config", metavar="JSON", help="e.g. '{\"temperature\": 0.6}'"
    )
    sim = parser.add_argument_group("simulator flags")
    sim.add_argument(
        "--default-temperature",
        type=float,
        default=None,
        metavar="T",
        help="temperature when a request has none (wins over the generation "
        f"config; default {default_of('default_temperature')})",
    )
    sim.add_argument("--seed", type=int, default=default_of("seed"))
    sim.add_argument(
        "--drafter-quality",
        type=float,
        default=default_of("drafter_quality"),
        metavar="Q",
        help="0..1; about the greedy acceptance rate (default %(default)s)",
    )
    sim.add_argument(
        "--draft-miss-rate",
        type=float,
        default=None,
        metavar="P",
        help="share of steps with no draft (default 0.15 for ngram/suffix, else 0)",
    )
    sim.add_argument(
        "--metric-names",
        default=default_of("metric_names"),
        choices=get_args(MetricNames),
        help="vllm: names, vllm_ names, or vllm_ samples under vllm: TYPE lines",
    )
    sim.add_argument(
        "--speed",
        type=float,
        default=default_of("speed"),
        help="time-scale factor: 10 runs engine steps ten times faster",
    )
    sim.add_argument(
        "--mean-output-tokens",
        type=int,
        default=default_of("mean_output_tokens"),
        help="mean length at which a response stops by itself",
    )
    sim.add_argument(
        "--no-chunk-merging",
        action="store_true",
        help="never merge engine steps into one SSE chunk for a slow client",
    )
    sim.add_argument(
        "--modelled-clock",
        action="store_true",
        help="timing metrics count modelled step time, not wall time",
    )


def build_config(args: argparse.Namespace) -> SimConfig:
    generation_config = None
    if args.generation_config:
        path = Path(args.generation_config) / "generation_config.json"
        try:
            generation_config = path.read_text()
        except OSError as exc:
            raise ConfigError(f"--generation-config: cannot read {path}: {exc.strerror}") from None
    temperature = parse_default_temperature(
        args.default_temperature, args.override_generation_config, generation_config
    )
    return SimConfig(
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        speculative=parse_speculative_config(args.speculative_config),
        per_request_spec_decode_metrics=args.per_request_spec_decode_metrics,
        enable_per_request_metrics=args.enable_per_request_metrics,
        enable_force_include_usage=args.enable_force_include_usage,
        data_parallel_size=args.data_parallel_size,
        api_server_count=args.api_server_count,
        default_temperature=temperature,
        seed=args.seed,
        drafter_quality=args.drafter_quality,
        draft_miss_rate=args.draft_miss_rate,
        metric_names=args.metric_names,
        speed=args.speed,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        mean_output_tokens=args.mean_output_tokens,
        merge_chunks=not args.no_chunk_merging,
        modelled_clock=args.modelled_clock,
    )


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

"""The `run` command: the long-running sidecar (poller + metrics server + optional request tap)."""

from __future__ import annotations

import argparse
from typing import Any

from specdec_exporter.logs import configure_logging
from specdec_exporter.sidecar.config import load_settings
from specdec_exporter.sidecar.serve import serve
from specdec_exporter.term import run_event_loop

SETTING_FLAGS: dict[str, str] = {
    "--vllm-url": "base URL of the vLLM server (default http://127.0.0.1:8000)",
    "--listen": "HOST:PORT for /metrics, /healthz, /readyz and / (default 0.0.0.0:10088)",
    "--interval": "seconds between polls of vLLM's /metrics (default 5)",
    "--scrape-timeout": "timeout of one poll, seconds (default 4)",
    "--window": "window of windowed figures such as modelled speedup, seconds (default 60)",
    "--max-body-bytes": "cap on a /metrics body (default 16 MiB)",
    "--draft-cost-ratio": "cost of one drafted token relative to a target step (c)",
    "--speculative-method": "vLLM speculative method, picks the default draft cost ratio",
    "--calibration": "calibrate's JSON file: c comes from it instead of being assumed",
    "--log-level": "debug, info, warning or error (default info)",
    "--log-interval": "minimum seconds between repeated error log lines (default 60)",
    "--proxy-listen": "HOST:PORT of the OpenAI-compatible request tap (off by default)",
    "--default-temperature": "temperature vLLM applies when a request has none",
    "--generation-config": "generation_config.json to read the default temperature from",
    "--temperature-buckets": "comma-separated bucket edges (default 0.5,0.7,1.0)",
    "--proxy-inspect-max-bytes": "largest request body the tap inspects (default 1 MiB)",
    "--proxy-timeout": "upstream timeout of the tap, seconds (default 600)",
}


def add_setting_flags(parser: argparse.ArgumentParser, flags: dict[str, str]) -> None:
    """Flags are passed as text to the Settings object, which validates them in one place."""
    for flag, help_text in flags.items():
        parser.add_argument(flag, help=help_text + "; env SPECDEC_" +
                            flag[2:].upper().replace("-", "_"))


def setting_overrides(args: argparse.Namespace, flags: dict[str, str]) -> dict[str, Any]:
    return {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag in flags}


def configure(parser: argparse.ArgumentParser) -> None:
    add_setting_flags(parser, SETTING_FLAGS)


def main(args: argparse.Namespace) -> int:
    settings = load_settings(**setting_overrides(args, SETTING_FLAGS))
    configure_logging(settings.log_level)
    run_event_loop(serve(settings))
    return 0

"""The `run` command: the long-running sidecar (poller + metrics server + optional request tap)."""

from __future__ import annotations

import argparse

from specdec_exporter.commands.flags import add_settings_flags, settings_from_args
from specdec_exporter.logs import configure_logging
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.serve import serve
from specdec_exporter.term import run_event_loop


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, Settings)


def main(args: argparse.Namespace) -> int:
    """0 after a signal and a complete drain; 1 when a task died or a second signal cut it short."""
    settings = settings_from_args(Settings, args)
    configure_logging(settings.log_level)
    return run_event_loop(serve(settings))

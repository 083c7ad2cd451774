"""The `install-probe` command: write the engine probe into a directory for vLLM's PYTHONPATH."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specdec_exporter.cli import EXIT_USAGE
from specdec_exporter.probe.install import InstallError, install

EXIT_CANNOT_WRITE = 73
"""sysexits.h EX_CANTCREAT."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        metavar="DIR",
        type=Path,
        nargs="?",  # checked in main, so that a mistyped flag is reported as such first
        help="where to write the probe (created if needed); start vLLM with PYTHONPATH=DIR "
        "and --per-request-spec-decode-metrics summary",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")


def main(args: argparse.Namespace) -> int:
    if args.directory is None:
        print("specdec-exporter install-probe: error: DIR is required", file=sys.stderr)
        return EXIT_USAGE
    try:
        written = install(args.directory)
    except InstallError as exc:
        print(f"specdec-exporter install-probe: {exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    if not args.quiet:
        print(f"wrote {len(written)} files into {args.directory}:")
        for name in written:
            print(f"  {name}")
    return 0

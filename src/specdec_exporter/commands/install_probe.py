"""The `install-probe` command: write the engine probe into a directory for vLLM's PYTHONPATH."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specdec_exporter.commands.exits import EXIT_CANNOT_WRITE, EXIT_USAGE
from specdec_exporter.probe.install import InstallError, install


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",  # checked in main, so that a mistyped flag is reported as such first
        help="where to write the probe (created if needed); start vLLM with PYTHONPATH=DIR "
        "and --per-request-spec-decode-metrics summary",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")


def main(args: argparse.Namespace) -> int:
    if args.directory is None:
        print("specdec-exporter install-probe: error: DIR is required", file=sys.stderr)
        return EXIT_USAGE
    if not args.directory.strip():  # "$DIR" of an unset variable: not the current directory
        print(
            "specdec-exporter install-probe: error: DIR is empty (an unset variable?); give "
            "the directory, '.' for the current one",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        written = install(Path(args.directory))
    except InstallError as exc:
        print(f"specdec-exporter install-probe: {exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    if not args.quiet:
        print(f"wrote {len(written)} files into {args.directory}:")
        for name in written:
            print(f"  {name}")
    return 0

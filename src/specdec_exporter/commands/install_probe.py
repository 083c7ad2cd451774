"""The `install-probe` command: write the engine probe into a directory for vLLM's PYTHONPATH."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specdec_exporter.probe.install import InstallError, install

EXIT_CANNOT_WRITE = 73
"""sysexits.h EX_CANTCREAT."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory",
        metavar="DIR",
        type=Path,
        help="where to write the probe (created if needed); start vLLM with PYTHONPATH=DIR "
        "and --per-request-spec-decode-metrics summary",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")


def main(args: argparse.Namespace) -> int:
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

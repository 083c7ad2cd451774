"""External tools the artifact tests need: fail on CI (CI=true) when missing, skip locally."""

from __future__ import annotations

import os
import shutil

import pytest


def on_ci() -> bool:
    return os.environ.get("CI") == "true"


def missing(reason: str) -> None:
    """Fail under CI=true (a missing tool must not turn checks green), else skip with `reason`."""
    if on_ci():
        pytest.fail(f"{reason} (CI=true: required)", pytrace=False)
    pytest.skip(f"{reason}; install it to run this check (see docs/alerting.md)")


def require(*candidates: str) -> str:
    """The path of the first of `candidates` on PATH."""
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    missing(f"{' / '.join(candidates)} not found on PATH")
    raise AssertionError("unreachable")  # pytest.fail/skip raise

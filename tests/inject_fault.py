"""`specdec-exporter` with one component of `run` made to fail on its first run: the fault a test
injects through the real command. Usage: python tests/inject_fault.py COMPONENT run [flags]."""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any

from specdec_exporter import cli
from specdec_exporter.sidecar.metrics_server import MetricsServer
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.tap_parts import TapParts

TARGETS: dict[str, tuple[type, str]] = {
    "poller": (Poller, "run"),
    "metrics_server": (MetricsServer, "serve"),
    "tap": (TapParts, "run"),
}
"""Each component `serve` supervises, and the method its run starts from."""

Run = Callable[..., Coroutine[Any, Any, None]]


def failing_once(component: str, original: Run) -> Run:
    runs = 0

    async def run(*args: Any, **kwargs: Any) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError(f"injected fault in the {component}")
        await original(*args, **kwargs)

    return run


def main() -> int:
    component = sys.argv.pop(1)
    owner, method = TARGETS[component]
    setattr(owner, method, failing_once(component, getattr(owner, method)))
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(main())

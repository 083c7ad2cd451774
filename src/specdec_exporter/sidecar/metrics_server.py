"""uvicorn serving the sidecar's app on a socket bound before it (``sidecar/listeners``), its
signals left to the supervisor."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from specdec_exporter.sidecar.supervisor import STOP_TIMEOUT


class MetricsServer(uvicorn.Server):
    """uvicorn on a socket ``serve`` bound first (a taken port is one line there, where uvicorn
    would log and ``sys.exit``); signals are left to the supervisor. Run as ``serve([socket])``."""

    def __init__(self, app: Any, on_started: Callable[[tuple[str, int]], None]) -> None:
        super().__init__(
            uvicorn.Config(
                app,
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=STOP_TIMEOUT,
            )
        )
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if sockets and not self.should_exit:
            host, port = sockets[0].getsockname()[:2]
            self._on_started((host, port))

    def stop(self) -> None:
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

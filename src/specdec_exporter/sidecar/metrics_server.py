"""uvicorn serving the sidecar's app on a socket bound here, its signals left to the supervisor."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from specdec_exporter.sidecar.supervisor import STOP_TIMEOUT


class MetricsServer(uvicorn.Server):
    """uvicorn on a socket bound here, so a taken port is an OSError the supervisor reports
    (uvicorn itself would log and ``sys.exit``); signals are left to the supervisor."""

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

    async def serve_on(self, address: tuple[str, int]) -> None:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, port), family=family, backlog=2048)
        await self.serve(sockets=[listener])

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

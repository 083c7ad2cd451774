"""Run the simulator under uvicorn: in the foreground (the CLI) or in a background thread.

The server can close its listening socket and reopen it on the same port (the refuse fault).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import uvicorn
import uvloop

from specdec_exporter.devtools.sim.app import SimApp
from specdec_exporter.devtools.sim.settings import SimConfig
from specdec_exporter.devtools.sim.simulation import Simulation
from specdec_exporter.sidecar.listeners import cannot_listen

T = TypeVar("T")
STARTUP_TIMEOUT = 15.0
BACKLOG = 2048
log = logging.getLogger(__name__)


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


class SimServer(uvicorn.Server):
    """uvicorn.Server that can close its listening socket and open it again later."""

    def __init__(self, config: uvicorn.Config, host: str, port: int) -> None:
        super().__init__(config)
        self.host = host
        self.port = port
        self.refusing = False
        self.on_started: Callable[[], None] | None = None
        """Called once serving, its signal handlers in place: Ctrl-C from then on stops it."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.on_started is not None and not self.should_exit:
            self.on_started()

    def _protocol_factory(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
        return self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config,
            server_state=self.server_state,
            app_state=self.lifespan.state,
            _loop=loop,
        )

    async def refuse_for(self, seconds: float) -> None:
        """Connection refused for ``seconds``: close the listener and every open connection."""
        if self.refusing:
            return
        self.refusing = True
        try:
            for server in self.servers:
                server.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()
            await asyncio.sleep(seconds)
            if not self.should_exit:
                await self._listen_again()
        finally:
            self.refusing = False

    async def _listen_again(self) -> None:
        loop = asyncio.get_running_loop()
        sock = bind_socket(self.host, self.port)
        server = await loop.create_server(self._protocol_factory, sock=sock, backlog=BACKLOG)
        self.servers = [server]


def uvicorn_config(app: SimApp) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level="warning",
        access_log=False,
        ws="none",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=30,
    )


def build(config: SimConfig, sock: socket.socket) -> tuple[SimServer, SimApp]:
    port = sock.getsockname()[1]
    sim = Simulation(config.with_port(port))
    app = SimApp(sim)
    server = SimServer(uvicorn_config(app), config.host, port)
    app.listener = server
    return server, app


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(config: SimConfig, announce: Callable[[str], None] | None = None) -> None:
    """Run in the foreground until interrupted (Ctrl-C or SIGTERM); a port in use is a
    ConfigError."""
    try:
        sock = bind_socket(config.host, config.port)
    except OSError as exc:
        raise cannot_listen("--port", config.host, config.port, exc) from None
    server, _ = build(config, sock)
    if announce is not None:
        url = url_of(config.host, sock.getsockname()[1])
        server.on_started = lambda: announce(url)
    server.run(sockets=[sock])


class RunningSimulator:
    """Handle on a simulator serving from a background thread."""

    def __init__(self, config: SimConfig) -> None:
        self._sock = bind_socket(config.host, config.port)
        self.port: int = self._sock.getsockname()[1]
        self.url = url_of(config.host, self.port)
        self.server, self.app = build(config, self._sock)
        self.config = self.app.sim.config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="vllm-simulator", daemon=True)

    def _run(self) -> None:
        loop = uvloop.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.serve(sockets=[self._sock]))
        except BaseException as exc:  # reported to the starting thread
            self._failure = exc
        finally:
            loop.close()

    def start(self) -> None:
        self._thread.start()
        pause = threading.Event()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self.server.started and self._thread.is_alive() and time.monotonic() < deadline:
            pause.wait(0.005)
        if not self.server.started:
            self.stop()
            raise RuntimeError(f"simulator did not start: {self._failure!r}")

    def call(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the simulator's event loop and return its result."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("simulator is not running")
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(function())
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return future.result(timeout=STARTUP_TIMEOUT)

    def ground_truth(self) -> dict[str, Any]:
        return self.call(self.app.sim.ground_truth)

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.app.begin_shutdown)
            self.server.should_exit = True
        self._thread.join(timeout=STARTUP_TIMEOUT)
        self._sock.close()


@contextlib.contextmanager
def running_simulator(config: SimConfig | None = None) -> Iterator[RunningSimulator]:
    """Start a simulator in a background thread (port 0 by default) and stop it on exit."""
    simulator = RunningSimulator(config or SimConfig())
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()

"""The `run` command's wiring: poller, metrics server and the optional request tap, supervised."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.options import ConfigError, redact_url
from specdec_exporter.sidecar.app import create_app
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.engine_config import EngineConfigWatch
from specdec_exporter.sidecar.explain import PageContext
from specdec_exporter.sidecar.listeners import (
    bind_listener,
    check_fd_reserve,
    raise_open_files_limit,
)
from specdec_exporter.sidecar.metrics_server import MetricsServer
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.scraper import Scraper
from specdec_exporter.sidecar.split_collector import SplitCollector
from specdec_exporter.sidecar.supervisor import Supervisor

if TYPE_CHECKING:
    from specdec_exporter.sidecar.tap_parts import TapParts

log = logging.getLogger("specdec_exporter")


async def serve(settings: Settings) -> int:
    """Serve until a signal or a task's failure; returns the exit code (see ``Supervisor``)."""
    open_files = raise_open_files_limit()
    check_fd_reserve(settings.listen_fd_reserve, open_files)
    metrics_socket = bind_listener(settings.listen_address, "--listen")
    tap_socket = (
        None
        if settings.proxy_address is None
        else _bind_or_close(settings.proxy_address, "--proxy-listen", metrics_socket)
    )
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    tap = _tap_parts(settings)
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
    async with httpx.AsyncClient(
        limits=limits, trust_env=False, verify=settings.vllm_ssl_context()
    ) as client:
        scraper = Scraper(
            client,
            settings.vllm_url,
            timeout=settings.scrape_timeout,
            max_body_bytes=settings.max_body_bytes,
            temperature_labels=TemperatureBuckets(settings.temperature_buckets).labels,
            probe_dir=None if settings.probe_dir is None else str(settings.probe_dir),
        )
        poller = Poller(
            scraper,
            interval=settings.interval,
            window=settings.window,
            cost=settings.draft_cost,
            criteria=settings.criteria,
            log_interval=settings.log_interval,
            tap_counts=tap.attributed if tap else None,
            tap_families=tap.stats.collect if tap else None,
            calibration=settings.loaded_calibration,
            max_models=settings.max_models,
            model_expiry=settings.model_expiry,
            engine_config=EngineConfigWatch(settings.speculative_choice),
            probe_files=settings.probe_dir is not None,
        )
        supervisor = Supervisor()
        registry.register(
            SpecDecodeCollector(
                poller.state,
                restarts=supervisor.restarts,
                cost=settings.draft_cost,
                method=settings.speculative_method,
                interval=settings.interval,
                window=settings.window,
                coverage_enabled=tap is not None,
            )
        )
        registry.register(SplitCollector(poller.state))  # the tap's split too, through it
        readiness = _Readiness(supervisor, poller, tap_enabled=tap is not None)
        app = create_app(
            registry,
            poller.state,
            readiness.not_ready,
            redact_url(settings.vllm_url),
            tap.landing_tables if tap else (),
            refresh_every=settings.interval,
            page=PageContext.of(settings),
        )
        metrics = _Restartable(
            lambda: MetricsServer(
                app,
                readiness.metrics_listening,
                head_timeout=settings.listen_head_timeout,
                max_connections=settings.listen_max_connections,
                fd_reserve=settings.listen_fd_reserve,
            )
        )
        supervisor.start("poller", poller.run)
        supervisor.start(
            "metrics_server",
            lambda: _on_a_copy(metrics_socket, lambda copy: metrics.new().serve([copy])),
            stop=metrics.stop,
        )
        if tap is not None and tap_socket is not None:
            tap_parts = tap
            supervisor.start(
                "tap",
                lambda: _on_a_copy(
                    tap_socket,
                    lambda copy: readiness.while_tap_runs(
                        tap_parts.run(readiness.tap_listening, supervisor.draining, copy)
                    ),
                ),
                drains=True,
            )
            supervisor.on_drain(tap_socket.close)  # the tap's drain then closes the last copy
        _log_start(settings, open_files)
        try:
            return await supervisor.run()
        finally:  # each run of a component served on a duplicate of these
            for listener in (metrics_socket, tap_socket):
                if listener is not None:
                    listener.close()


async def _on_a_copy(
    listener: socket.socket, serve_on: Callable[[socket.socket], Coroutine[Any, Any, None]]
) -> None:
    """One run of a component on a duplicate of ``listener``, closed however the run ends (a
    run that fails before its server owns the copy must not leak a descriptor per restart)."""
    copy = listener.dup()
    try:
        await serve_on(copy)
    finally:
        copy.close()


class _Restartable:
    """The metrics server's current uvicorn server: each (re)start runs a new one, on a
    duplicate of the listening socket, so the socket itself stays bound (connections wait in its
    backlog while the server restarts) and ``stop`` reaches the one running."""

    def __init__(self, make: Callable[[], MetricsServer]) -> None:
        self._make = make
        self._current: MetricsServer | None = None

    def new(self) -> MetricsServer:
        self._current = self._make()
        return self._current

    def stop(self) -> None:
        if self._current is not None:
            self._current.stop()


def _tap_parts(settings: Settings) -> TapParts | None:
    if settings.proxy_listen is None:
        return None
    from specdec_exporter.sidecar.tap_parts import TapParts  # noqa: PLC0415  only with the tap

    return TapParts(settings)


class _Readiness:
    """What /readyz says. With the tap: ready while the tap listens and the supervisor is not
    draining, never on a poll of vLLM (the pod's readiness follows it, and clients must reach
    vLLM through the tap whatever its metrics do). Without it: once the first poll is done,
    until draining."""

    def __init__(self, supervisor: Supervisor, poller: Poller, *, tap_enabled: bool) -> None:
        self._supervisor = supervisor
        self._poller = poller
        self._tap_enabled = tap_enabled
        self._tap_up = asyncio.Event()

    def not_ready(self) -> str | None:
        if self._supervisor.draining.is_set():
            return "stopping: draining the tap"
        if self._tap_enabled:
            return None if self._tap_up.is_set() else "the tap is not listening yet"
        if not self._poller.first_poll_done.is_set():
            return "first poll of vLLM not done yet"
        return None

    def metrics_listening(self, address: tuple[str, int]) -> None:
        _log_listening("metrics", address)

    def tap_listening(self, address: tuple[str, int]) -> None:
        _log_listening("tap", address)
        self._tap_up.set()

    async def while_tap_runs(self, run: Coroutine[Any, Any, None]) -> None:
        """One run of the tap: not ready from its end until the restarted tap listens again (its
        clients then wait in the socket's backlog, so the pod leaves the Service meanwhile)."""
        try:
            await run
        finally:
            self._tap_up.clear()


def _log_listening(component: str, address: tuple[str, int]) -> None:
    log.info("listening", extra={"component": component, "address": f"{address[0]}:{address[1]}"})


def _log_start(settings: Settings, open_files: int) -> None:
    """c and the method as known before vLLM answers; the "engine probe" line follows with vLLM's
    own config once a poll shows it (sidecar/engine_config.py)."""
    choice = settings.speculative_choice(None)
    log.info(
        "starting",
        extra={
            "heap_frozen_objects": freeze_startup_heap(),
            "open_files_limit": open_files,
            "vllm_url": redact_url(settings.vllm_url),
            "interval": settings.interval,
            "draft_cost_ratio": choice.cost.ratio,
            "draft_cost_ratio_source": choice.cost.source,
            "speculative_method": choice.method,
            "speculative_method_source": choice.source,
        },
    )


def _bind_or_close(address: tuple[str, int], flag: str, bound: socket.socket) -> socket.socket:
    """Bind the tap's address; if that fails, close the metrics socket bound before it."""
    try:
        return bind_listener(address, flag)
    except ConfigError:
        bound.close()
        raise


def freeze_startup_heap() -> int:
    """Put what start-up allocated (modules, the app, settings: some 56,000 objects) out of the
    cyclic collector's reach, and return how many. A full collection then walks only what
    serving allocated; without this it walks them all, a pause of 20-30 ms for every stream the
    tap is passing (benchmarks/tap_gc_pauses.py). Garbage is collected first, so none is kept."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()

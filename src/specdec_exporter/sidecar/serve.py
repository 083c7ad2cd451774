"""The `run` command's wiring: poller, metrics server and the optional request tap, supervised."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from typing import TYPE_CHECKING

import httpx
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.options import ConfigError
from specdec_exporter.sidecar.app import create_app
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.explain import PageContext
from specdec_exporter.sidecar.listeners import bind_listener
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
        )
        registry.register(
            SpecDecodeCollector(
                poller.state,
                cost=settings.draft_cost,
                method=settings.speculative_method,
                interval=settings.interval,
                window=settings.window,
                coverage_enabled=tap is not None,
            )
        )
        registry.register(SplitCollector(poller.state))  # the tap's split too, through it
        supervisor = Supervisor()
        readiness = _Readiness(supervisor, poller, tap_enabled=tap is not None)
        app = create_app(
            registry,
            poller.state,
            readiness.not_ready,
            settings.vllm_url,
            tap.landing_tables if tap else (),
            refresh_every=settings.interval,
            page=PageContext.of(settings),
        )
        metrics = MetricsServer(app, readiness.metrics_listening)
        supervisor.start("poller", poller.run())
        supervisor.start("metrics server", metrics.serve([metrics_socket]), stop=metrics.stop)
        if tap is not None:
            supervisor.start(
                "tap",
                tap.run(readiness.tap_listening, supervisor.draining, tap_socket),
                drains=True,
            )
        _log_start(settings)
        return await supervisor.run()


def _tap_parts(settings: Settings) -> TapParts | None:
    if settings.proxy_listen is None:
        return None
    from specdec_exporter.sidecar.tap_parts import TapParts  # noqa: PLC0415  only with the tap

    return TapParts(settings)


class _Readiness:
    """What /readyz says: ready once the first poll is done and the tap (if any) listens, until
    the supervisor starts draining."""

    def __init__(self, supervisor: Supervisor, poller: Poller, *, tap_enabled: bool) -> None:
        self._supervisor = supervisor
        self._poller = poller
        self._tap_enabled = tap_enabled
        self._tap_up = asyncio.Event()

    def not_ready(self) -> str | None:
        if self._supervisor.draining.is_set():
            return "stopping: draining the tap"
        if not self._poller.first_poll_done.is_set():
            return "first poll of vLLM not done yet"
        if self._tap_enabled and not self._tap_up.is_set():
            return "the tap is not listening yet"
        return None

    def metrics_listening(self, address: tuple[str, int]) -> None:
        _log_listening("metrics", address)

    def tap_listening(self, address: tuple[str, int]) -> None:
        _log_listening("tap", address)
        self._tap_up.set()


def _log_listening(component: str, address: tuple[str, int]) -> None:
    log.info("listening", extra={"component": component, "address": f"{address[0]}:{address[1]}"})


def _log_start(settings: Settings) -> None:
    cost = settings.draft_cost
    log.info(
        "starting",
        extra={
            "heap_frozen_objects": freeze_startup_heap(),
            "vllm_url": settings.vllm_url,
            "interval": settings.interval,
            "draft_cost_ratio": cost.ratio,
            "draft_cost_ratio_source": cost.source,
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

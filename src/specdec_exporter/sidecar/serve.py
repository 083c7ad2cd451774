"""The `run` command's wiring: poller, metrics server and the optional request tap, supervised."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.report import BucketKey
from specdec_exporter.sidecar.app import LandingRows, bucket_window_rows, create_app
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.config import ConfigError, Settings
from specdec_exporter.sidecar.listeners import bind_listener
from specdec_exporter.sidecar.poller import Poller, PollState
from specdec_exporter.sidecar.scraper import Scraper
from specdec_exporter.term import Cell

log = logging.getLogger("specdec_exporter")

EXIT_OK, EXIT_FAILED = 0, 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_TIMEOUT = 5
"""Seconds the metrics server and poller get to stop once the tap has drained."""


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
    cost = settings.draft_cost
    supervisor = Supervisor()
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        scraper = Scraper(
            client,
            settings.vllm_url,
            timeout=settings.scrape_timeout,
            max_body_bytes=settings.max_body_bytes,
        )

        def num_speculative_tokens(model: str) -> int | None:
            snapshot = poller.state.snapshot
            return None if snapshot is None else snapshot.num_speculative_tokens(model)

        tap = (
            _TapParts(settings, registry, num_speculative_tokens) if settings.proxy_listen else None
        )

        def tap_counts() -> dict[BucketKey, Totals]:
            assert tap is not None
            return tap.attributed(poller.state.models_seen)

        poller = Poller(
            scraper,
            interval=settings.interval,
            window=settings.window,
            cost=cost,
            criteria=settings.criteria,
            log_interval=settings.log_interval,
            tap_counts=tap_counts if tap else None,
            max_models=settings.max_models,
            model_expiry=settings.model_expiry,
        )
        registry.register(
            SpecDecodeCollector(
                poller.state,
                cost=cost,
                method=settings.speculative_method,
                interval=settings.interval,
                window=settings.window,
                coverage_enabled=tap is not None,
            )
        )
        tap_listening = asyncio.Event()

        def not_ready() -> str | None:
            if supervisor.draining.is_set():
                return "stopping: draining the tap"
            if not poller.first_poll_done.is_set():
                return "first poll of vLLM not done yet"
            if tap is not None and not tap_listening.is_set():
                return "the tap is not listening yet"
            return None

        def listening(kind: str, address: tuple[str, int]) -> None:
            text = f"{address[0]}:{address[1]}"
            log.info("listening", extra={"component": kind, "address": text})
            if kind == "tap":
                tap_listening.set()

        app = create_app(
            registry,
            poller.state,
            not_ready,
            settings.vllm_url,
            tap.landing_tables if tap else (),
            refresh_every=settings.interval,
        )
        metrics = _MetricsServer(app, lambda address: listening("metrics", address))
        supervisor.start("poller", poller.run())
        supervisor.start("metrics server", metrics.serve([metrics_socket]), stop=metrics.stop)
        if tap is not None:
            supervisor.start(
                "tap",
                tap.run(
                    settings,
                    poller,
                    lambda address: listening("tap", address),
                    supervisor.draining,
                    tap_socket,
                ),
                drains=True,
            )
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
        return await supervisor.run()


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


@dataclass(frozen=True)
class _Supervised:
    name: str
    drains: bool
    stop: Callable[[], object] | None


class Supervisor:
    """The one owner of serve()'s tasks and of the stop signals.

    - A task that ends on its own (an exception, or a return) stops everything: one error line,
      every other task cancelled, exit 1.
    - The first SIGTERM or SIGINT sets ``draining``. Tasks started with ``drains=True`` (the tap)
      finish their in-flight work and return; the others (the metrics server, the poller) keep
      serving until then and are stopped after: exit 0.
    - A second signal cancels everything at once: exit 1.
    """

    def __init__(self) -> None:
        self.draining = asyncio.Event()
        self._abort = asyncio.Event()
        self._tasks: dict[asyncio.Task[None], _Supervised] = {}

    def start(
        self,
        name: str,
        coroutine: Coroutine[Any, Any, None],
        *,
        drains: bool = False,
        stop: Callable[[], object] | None = None,
    ) -> None:
        """Run ``coroutine``; ``stop`` asks it to end once draining is over (default: cancel)."""
        task = asyncio.create_task(_no_system_exit(coroutine), name=name)
        self._tasks[task] = _Supervised(name, drains, stop)

    def on_signal(self) -> None:
        if self.draining.is_set():
            log.warning("second stop signal: exiting now")
            self._abort.set()
        else:
            log.info("stopping")
            self.draining.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for number in STOP_SIGNALS:
            loop.add_signal_handler(number, self.on_signal)
        try:
            return await self._supervise()
        finally:
            for number in STOP_SIGNALS:
                loop.remove_signal_handler(number)
            await self._cancel_all()

    async def _supervise(self) -> int:
        failed = await self._watch(self.draining, lambda: False)
        if failed is None:
            failed = await self._watch(self._abort, self._drained)
        if failed is not None:
            self._report(failed)
            return EXIT_FAILED
        if self._abort.is_set():
            return EXIT_FAILED
        await self._stop_the_rest()
        log.info("stopped")
        return EXIT_OK

    async def _watch(
        self, until: asyncio.Event, done: Callable[[], bool]
    ) -> asyncio.Task[None] | None:
        """Wait for ``until`` or ``done()``; return the first task that ended when it should not."""
        waiter = asyncio.ensure_future(until.wait())
        try:
            while not until.is_set() and not done():
                running = {task for task in self._tasks if not task.done()}
                finished, _ = await asyncio.wait(
                    {*running, waiter}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in running & finished:
                    if not self._ended_as_planned(task):
                        return task
            return None
        finally:
            waiter.cancel()

    def _ended_as_planned(self, task: asyncio.Task[None]) -> bool:
        return (
            self.draining.is_set()
            and self._tasks[task].drains
            and not task.cancelled()
            and task.exception() is None
        )

    def _drained(self) -> bool:
        return all(task.done() for task, spec in self._tasks.items() if spec.drains)

    async def _stop_the_rest(self) -> None:
        running = [task for task in self._tasks if not task.done()]
        for task in running:
            stop = self._tasks[task].stop
            if stop is None:
                task.cancel()
            else:
                stop()
        if running:
            await asyncio.wait(running, timeout=STOP_TIMEOUT)

    async def _cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _report(self, task: asyncio.Task[None]) -> None:
        """One error line (JSON, on stderr) saying which task ended and why."""
        name = self._tasks[task].name
        error = None if task.cancelled() else task.exception()
        extra = {"task": name}
        if error is None:
            log.error("%s stopped unexpectedly; exiting", name, extra=extra)
        elif isinstance(error, OSError):  # a taken port, a refused bind: no traceback needed
            log.error("%s failed; exiting: %s", name, error, extra=extra)
        else:
            log.error(
                "%s failed; exiting: %s: %s",
                name,
                type(error).__name__,
                error,
                extra=extra,
                exc_info=error,
            )


async def _no_system_exit(coroutine: Coroutine[Any, Any, None]) -> None:
    """A library's ``sys.exit`` inside a task would escape the event loop; make it a failure."""
    try:
        await coroutine
    except SystemExit as exc:
        raise RuntimeError(f"exited with status {exc.code}") from None


class _MetricsServer(uvicorn.Server):
    """uvicorn on a socket bound before it starts (serve's ``bind_listener``: uvicorn itself
    would log a taken port and ``sys.exit``); signals are left to the supervisor."""

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


class _TapParts:
    """The request tap's pieces, imported only when the tap is enabled."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        num_speculative_tokens: Callable[[str], int | None],
    ) -> None:
        from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
        from specdec_exporter.tap.stats import RequestStats  # noqa: PLC0415

        self.stats = RequestStats(
            TemperatureBuckets(settings.temperature_buckets), num_speculative_tokens
        )
        self.stats.register(registry)
        self.landing_tables: list[tuple[str, LandingRows]] = [
            ("Acceptance by temperature bucket (request tap, sidecar window)", bucket_window_rows),
            ("Acceptance by temperature bucket (request tap, since start)", self.bucket_rows),
        ]

    def attributed(self, served_models: frozenset[str]) -> dict[BucketKey, Totals]:
        """Per (model, bucket), the attributed counts so far; also pre-creates every served
        model's per-bucket series at 0, so they exist before the first request; drops the series
        of models the poller no longer keeps (bounded labels)."""
        from specdec_exporter.tap.request import OTHER_MODEL  # noqa: PLC0415

        self.stats.retain_models(served_models | {OTHER_MODEL})
        for model in served_models:
            self.stats.add_model(model)
        return {
            (row.model_name, row.temperature_bucket): Totals(
                row.drafts, row.draft_tokens, row.accepted_tokens
            )
            for row in self.stats.bucket_summary()
        }

    def bucket_rows(self, _state: PollState) -> tuple[Sequence[str], Sequence[Sequence[Cell]]]:
        headers = (
            "model",
            "temperature bucket",
            "requests",
            "attributed",
            "acceptance rate",
            "mean acceptance length",
        )
        rows = [
            (
                row.model_name,
                row.temperature_bucket,
                row.requests,
                row.attributed,
                row.acceptance_rate,
                row.mean_acceptance_length,
            )
            for row in self.stats.bucket_summary()
        ]
        return headers, rows

    async def run(
        self,
        settings: Settings,
        poller: Poller,
        on_started: Callable[[tuple[str, int]], None],
        draining: asyncio.Event,
        listener: socket.socket | None,
    ) -> None:
        from specdec_exporter.tap.proxy import run_tap  # noqa: PLC0415

        def known_models() -> frozenset[str]:
            return poller.state.models_seen

        await run_tap(
            settings, self.stats, known_models, on_started, draining=draining, listener=listener
        )

"""The sidecar's wiring: poller, metrics server and the optional request tap, until a signal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator, Sequence

import httpx
import uvicorn
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from specdec_exporter.core.acceptance import draft_cost_ratio_for
from specdec_exporter.sidecar.app import LandingRows, create_app
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.config import Settings, load_calibration
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.scraper import Scraper
from specdec_exporter.term import Cell

log = logging.getLogger("specdec_exporter")

async def serve(settings: Settings,
                on_listening: Callable[[dict[str, str]], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation). `on_listening` gets the bound addresses."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    cost_ratio = draft_cost_ratio_for(settings.speculative_method, settings.draft_cost_ratio)
    if settings.calibration is not None:  # measured c wins over the flag and method default
        cost_ratio = load_calibration(settings.calibration).cost_ratio_for()
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        scraper = Scraper(client, settings.vllm_url, timeout=settings.scrape_timeout,
                          max_body_bytes=settings.max_body_bytes)
        def num_speculative_tokens(model: str) -> int | None:
            snapshot = poller.state.snapshot
            return None if snapshot is None else snapshot.num_speculative_tokens(model)

        tap = (_TapParts(settings, registry, num_speculative_tokens)
               if settings.proxy_listen else None)
        def attributed() -> dict[str, float]:
            assert tap is not None
            return tap.attributed(poller.state.models_seen)

        poller = Poller(scraper, interval=settings.interval, window=settings.window,
                        cost_ratio=cost_ratio, log_interval=settings.log_interval,
                        attributed=attributed if tap else None)
        registry.register(SpecDecodeCollector(poller.state, cost_ratio=cost_ratio,
                                              interval=settings.interval, window=settings.window,
                                              coverage_enabled=tap is not None))
        tap_ready = asyncio.Event()
        if tap is None:
            tap_ready.set()

        def is_ready() -> bool:
            return poller.first_poll_done.is_set() and tap_ready.is_set()

        app = create_app(registry, poller.state, is_ready, settings.vllm_url,
                         tap.landing_tables if tap else ())
        host, port = settings.listen_address
        server = _Server(uvicorn.Config(app, host=host, port=port, log_config=None,
                                        access_log=False, lifespan="off"))
        addresses: dict[str, str] = {}

        def listening(kind: str, address: tuple[str, int]) -> None:
            addresses[kind] = f"{address[0]}:{address[1]}"
            log.info("listening", extra={"component": kind, "address": addresses[kind]})
            if kind == "tap":
                tap_ready.set()
            if on_listening is not None and len(addresses) == (2 if tap else 1):
                on_listening(dict(addresses))

        background = [asyncio.create_task(poller.run(), name="poller")]
        if tap is not None:
            background.append(asyncio.create_task(
                tap.run(settings, poller, lambda address: listening("tap", address)), name="tap"))
        background.append(asyncio.create_task(_announce(server, listening), name="announce"))
        log.info("starting", extra={"vllm_url": settings.vllm_url, "interval": settings.interval,
                                    "draft_cost_ratio": cost_ratio})
        try:
            await server.serve()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after its shutdown; the sidecar stops cleanly with exit 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        stop_signals = (signal.SIGINT, signal.SIGTERM)
        for number in stop_signals:
            loop.add_signal_handler(number, self._request_exit)
        try:
            yield
        finally:
            for number in stop_signals:
                loop.remove_signal_handler(number)

    def _request_exit(self) -> None:
        log.info("stopping")
        self.should_exit = True


async def _announce(server: uvicorn.Server,
                    listening: Callable[[str, tuple[str, int]], None]) -> None:
    while not server.started:
        await asyncio.sleep(0.01)
    socket = server.servers[0].sockets[0]
    host, port = socket.getsockname()[:2]
    listening("metrics", (host, port))


class _TapParts:
    """The request tap's pieces, imported only when the tap is enabled."""

    def __init__(self, settings: Settings, registry: CollectorRegistry,
                 num_speculative_tokens: Callable[[str], int | None]) -> None:
        from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
        from specdec_exporter.tap.stats import RequestStats  # noqa: PLC0415

        self.stats = RequestStats(TemperatureBuckets(settings.temperature_buckets),
                                  num_speculative_tokens)
        self.stats.register(registry)
        self.landing_tables: list[tuple[str, LandingRows]] = [
            ("Acceptance by temperature bucket (request tap, since start)", self.bucket_rows)]

    def attributed(self, served_models: frozenset[str]) -> dict[str, float]:
        """Per model, draft tokens attributed so far; also pre-creates every served model's
        per-bucket series at 0, so they exist before the first request."""
        for model in served_models:
            self.stats.add_model(model)
        models: dict[str, float] = {}
        for row in self.stats.bucket_summary():
            models[row.model_name] = models.get(row.model_name, 0.0) + row.draft_tokens
        return models

    def bucket_rows(self) -> tuple[Sequence[str], Sequence[Sequence[Cell]]]:
        headers = ("model", "temperature bucket", "requests", "attributed", "acceptance rate",
                   "mean acceptance length")
        rows = [
            (row.model_name, row.temperature_bucket, row.requests, row.attributed,
             row.acceptance_rate, row.mean_acceptance_length)
            for row in self.stats.bucket_summary()
        ]
        return headers, rows

    async def run(self, settings: Settings, poller: Poller,
                  on_started: Callable[[tuple[str, int]], None]) -> None:
        from specdec_exporter.tap.proxy import run_tap  # noqa: PLC0415

        def known_models() -> frozenset[str]:
            return poller.state.models_seen

        await run_tap(settings, self.stats, known_models, on_started)

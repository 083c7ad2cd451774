"""The `run` command: the long-running sidecar (poller + metrics server + optional request tap)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import uvicorn
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from specdec_exporter.acceptance import draft_cost_ratio_for
from specdec_exporter.app import LandingRows, create_app
from specdec_exporter.collector import SpecDecodeCollector
from specdec_exporter.config import Settings, load_settings
from specdec_exporter.logs import configure_logging
from specdec_exporter.poller import Poller
from specdec_exporter.scraper import Scraper
from specdec_exporter.term import Cell, run_event_loop

log = logging.getLogger("specdec_exporter")

SETTING_FLAGS: dict[str, str] = {
    "--vllm-url": "base URL of the vLLM server (default http://127.0.0.1:8000)",
    "--listen": "HOST:PORT for /metrics, /healthz, /readyz and / (default 0.0.0.0:10088)",
    "--interval": "seconds between polls of vLLM's /metrics (default 5)",
    "--scrape-timeout": "timeout of one poll, seconds (default 4)",
    "--window": "window of windowed figures such as modelled speedup, seconds (default 60)",
    "--max-body-bytes": "cap on a /metrics body (default 16 MiB)",
    "--draft-cost-ratio": "cost of one drafted token relative to a target step (c)",
    "--speculative-method": "vLLM speculative method, picks the default draft cost ratio",
    "--log-level": "debug, info, warning or error (default info)",
    "--log-interval": "minimum seconds between repeated error log lines (default 60)",
    "--proxy-listen": "HOST:PORT of the OpenAI-compatible request tap (off by default)",
    "--default-temperature": "temperature vLLM applies when a request has none",
    "--generation-config": "generation_config.json to read the default temperature from",
    "--temperature-buckets": "comma-separated bucket edges (default 0.5,0.7,1.0)",
    "--proxy-inspect-max-bytes": "largest request body the tap inspects (default 1 MiB)",
    "--proxy-timeout": "upstream timeout of the tap, seconds (default 600)",
}


def add_setting_flags(parser: argparse.ArgumentParser, flags: dict[str, str]) -> None:
    """Flags are passed as text to the Settings object, which validates them in one place."""
    for flag, help_text in flags.items():
        parser.add_argument(flag, help=help_text + "; env SPECDEC_" +
                            flag[2:].upper().replace("-", "_"))


def setting_overrides(args: argparse.Namespace, flags: dict[str, str]) -> dict[str, Any]:
    return {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag in flags}


def configure(parser: argparse.ArgumentParser) -> None:
    add_setting_flags(parser, SETTING_FLAGS)


def main(args: argparse.Namespace) -> int:
    settings = load_settings(**setting_overrides(args, SETTING_FLAGS))
    configure_logging(settings.log_level)
    run_event_loop(serve(settings))
    return 0


async def serve(settings: Settings,
                on_listening: Callable[[dict[str, str]], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation). `on_listening` gets the bound addresses."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    cost_ratio = draft_cost_ratio_for(settings.speculative_method, settings.draft_cost_ratio)
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
        from specdec_exporter.buckets import TemperatureBuckets  # noqa: PLC0415
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

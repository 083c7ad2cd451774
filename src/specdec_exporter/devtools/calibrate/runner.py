"""The calibrate run: per (concurrency, temperature), one seeded load phase on each server in turn.

``run_calibration(config, assumed_cost_ratio)`` is the in-process entry point. Phases never
overlap (the servers may share a host), so each spec server's counter delta and each server's
TPOTs belong to one (server, concurrency, temperature); every phase sends the same requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Annotated

import httpx
from pydantic import AfterValidator, ConfigDict, Field

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.calibration import CalibrationPoint, PhaseTiming, TpotSource, make_point
from specdec_exporter.core.parse import ExpositionError, Snapshot, parse, requests_running
from specdec_exporter.deadline import total_deadline
from specdec_exporter.devtools.load.config import Count, LoadConfig, RequestContent, RequestTimeout
from specdec_exporter.devtools.load.counters import (
    CounterReading,
    CounterWatch,
    Settling,
    counters_settled,
    expected_generation_tokens,
    model_totals,
    phase_delta,
)
from specdec_exporter.devtools.load.mix import MixEntry, parse_temperatures, temperature_label
from specdec_exporter.devtools.load.results import LoadResult, RequestResult
from specdec_exporter.devtools.load.runner import (
    FAILURE_TEXT,
    ModelLookupError,
    build_client,
    error_kind,
    fetch_model,
    run_load,
)
from specdec_exporter.options import HttpUrl, Metavar, Seed
from specdec_exporter.trust import VllmTrust

PhaseCallback = Callable[[str], None]
DEFAULT_TEMPERATURES_TEXT = "0,0.7,1.0"
FIRST_SAMPLE_SECONDS = 0.05
"""The first num_requests_running sample comes this soon (or after the interval, if shorter):
a phase shorter than --sample-interval on a fast machine still has a sample."""


class CalibrateError(RuntimeError):
    """The servers cannot be calibrated (unreachable, not the same model, spec on/off wrong)."""


class ServerUnreachableError(CalibrateError):
    """A server did not answer, or not as vLLM: ``detail`` says how."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"{url}: {detail}")
        self.url = url
        self.detail = detail


def _ascending(values: tuple[int, ...]) -> tuple[int, ...]:
    """The concurrencies in ascending order, each once; at least one."""
    if not values:
        raise ValueError("no concurrency given")
    return tuple(sorted(set(values)))


Concurrencies = Annotated[tuple[Count, ...], AfterValidator(_ascending), Metavar("LIST")]


class CalibrateOptions(Settling, VllmTrust, RequestTimeout):
    """The calibration's fields that `calibrate` takes as flags of the same names."""

    concurrencies: Concurrencies = Field(
        default=(1, 8, 32), alias="concurrency", description="client concurrencies to measure"
    )
    requests: Count | None = Field(
        default=None,
        description="requests per phase; unset: four rounds of the concurrency, at least 8",
    )
    max_tokens: int = Field(
        default=128,
        ge=2,
        le=1_000_000,
        description="max_tokens of every request (TPOT needs two tokens)",
    )
    seed: Seed = Field(
        default=0, description="the load's seed: every server gets the same requests"
    )
    model: str | None = Field(
        default=None, description="model name to send; unset: from each server's /v1/models"
    )
    warmup: int = Field(
        default=4, ge=0, le=10_000, description="unmeasured requests sent to each server first"
    )
    tpot_source: TpotSource = Field(
        default="client",
        description="client: as streamed to this client; server: vLLM's metrics.mean_itl_ms "
        "(needs --enable-per-request-metrics)",
    )
    sample_interval: float = Field(
        default=0.25,
        ge=0.01,
        le=60,
        description="seconds between samples of num_requests_running",
    )


class CalibrateConfig(CalibrateOptions, RequestContent, CounterWatch):
    """Everything a calibration needs; one phase per (server, concurrency, temperature)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec_urls: tuple[HttpUrl, ...]
    """One vLLM with speculative decoding per k (k is read from its per-position series)."""
    base_url: HttpUrl
    temperatures: tuple[float | None, ...] = Field(
        default=parse_temperatures(DEFAULT_TEMPERATURES_TEXT), min_length=1
    )

    def phase_requests(self, concurrency: int) -> int:
        return self.requests if self.requests is not None else max(8, 4 * concurrency)

    def load(
        self, url: str, model: str, concurrency: int, temperature: float | None, requests: int
    ) -> LoadConfig:
        """Streamed (TPOT needs the chunks' times), usage included (exact token counts)."""
        return LoadConfig(
            url=url,
            model=model,
            concurrency=concurrency,
            requests=requests,
            mix=(MixEntry(temperature, 1.0),),
            stream_share=1.0,
            include_usage=True,
            max_tokens=self.max_tokens,
            timeout=self.timeout,
            endpoint="chat",
            prompts=self.prompts,
            seed=self.seed,
            api_key=self.api_key,
            **self.vllm_trust(),
        )


@dataclass(frozen=True)
class Server:
    url: str
    k: int | None
    """None: the plain (no speculation) server."""


@dataclass(frozen=True)
class CalibrationRun:
    model: str
    servers: tuple[Server, ...]
    points: tuple[CalibrationPoint, ...]


def mean_tpot_ms(results: Sequence[RequestResult], source: TpotSource) -> tuple[float | None, int]:
    """The phase's TPOT in ms, and how many requests had one.

    Each request's TPOT is weighted by its tokens after the first: total decode time over
    total decode tokens, counted the way L is (tokens over steps), so that one slow request
    with few tokens does not outweigh the tokens of the others."""
    weighted = [
        (tpot, result.output_tokens - 1)
        for result in results
        if result.ok
        and result.output_tokens is not None
        and result.output_tokens > 1
        and (tpot := result.tpot if source == "client" else result.server_tpot) is not None
    ]
    tokens = sum(count for _, count in weighted)
    if not tokens:
        return None, 0
    return sum(tpot * count for tpot, count in weighted) / tokens * 1000.0, len(weighted)


async def run_calibration(
    config: CalibrateConfig,
    assumed_cost_ratio: float,
    on_phase: PhaseCallback | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> CalibrationRun:
    """Discover the servers, warm them up, then measure every phase in order."""
    async with httpx.AsyncClient(
        transport=transport,
        trust_env=False,
        timeout=config.scrape_timeout,
        verify=config.vllm_ssl_context(),
    ) as client:
        run = _Calibration(config, client, transport, on_phase or (lambda _: None))
        return await run.execute(assumed_cost_ratio)


class _Calibration:
    def __init__(
        self,
        config: CalibrateConfig,
        client: httpx.AsyncClient,
        transport: httpx.AsyncBaseTransport | None,
        say: PhaseCallback,
    ) -> None:
        self._config = config
        self._client = client
        self._transport = transport
        self._say = say
        self._model = ""

    async def execute(self, assumed_cost_ratio: float) -> CalibrationRun:
        servers = await self._discover()
        for server in servers:
            await self._warm_up(server)
        points = []
        total = len(self._config.concurrencies) * len(self._config.temperatures) * len(servers)
        done = 0
        for concurrency in self._config.concurrencies:
            for temperature in self._config.temperatures:
                timings: dict[Server, tuple[PhaseTiming, Totals]] = {}
                for server in servers:
                    done += 1
                    self._say(
                        f"[{done}/{total}] {_describe(server)}, concurrency {concurrency}, "
                        f"temperature {temperature_label(temperature)}"
                    )
                    timings[server] = await self._phase(server, concurrency, temperature)
                base = timings[servers[-1]][0]
                points += [
                    make_point(
                        concurrency=concurrency,
                        temperature=temperature,
                        k=server.k,
                        counts=counts,
                        spec=timing,
                        base=base,
                        assumed_cost_ratio=assumed_cost_ratio,
                    )
                    for server, (timing, counts) in timings.items()
                    if server.k is not None
                ]
        return CalibrationRun(self._model, tuple(servers), tuple(points))

    async def _discover(self) -> list[Server]:
        """Each server's model and k; the plain server goes last."""
        urls = [*self._config.spec_urls, self._config.base_url]
        models = {url: self._config.model or await self._model_of(url) for url in urls}
        if len(set(models.values())) > 1:
            served = ", ".join(f"{url} serves {model}" for url, model in models.items())
            raise CalibrateError(f"the servers must serve the same model: {served}")
        self._model = models[urls[0]]
        servers = [Server(url, await self._k_of(url)) for url in self._config.spec_urls]
        base = await self._snapshot(self._config.base_url)
        if base.spec_decode_enabled:
            raise CalibrateError(
                f"--base-url {self._config.base_url} runs speculative decoding; "
                "give a server started without --speculative-config"
            )
        return [*servers, Server(self._config.base_url, None)]

    async def _model_of(self, url: str) -> str:
        load = LoadConfig(
            url=url,
            requests=1,
            api_key=self._config.api_key,
            timeout=self._config.scrape_timeout,
            **self._config.vllm_trust(),
        )
        async with build_client(load, self._transport) as client:
            try:
                return await fetch_model(client, load.timeout)
            except ModelLookupError as exc:
                raise ServerUnreachableError(url, str(exc)) from None

    async def _k_of(self, url: str) -> int:
        snapshot = await self._snapshot(url)
        k = snapshot.num_speculative_tokens(self._model) or max(
            (snapshot.num_speculative_tokens(model) or 0 for model in snapshot.models), default=0
        )
        if not snapshot.spec_decode_enabled or not k:
            raise CalibrateError(
                f"--spec-url {url} shows no speculative decoding (no "
                "per-position series in its /metrics)"
            )
        return k

    async def _metrics_text(self, url: str) -> str:
        try:
            async with total_deadline(self._config.scrape_timeout):
                response = await self._client.get(url.rstrip("/") + "/metrics")
        except httpx.HTTPError as exc:
            kind = FAILURE_TEXT.get(error_kind(exc), error_kind(exc))
            raise ServerUnreachableError(url, f"GET /metrics: {kind}") from None
        if response.status_code != 200:
            raise ServerUnreachableError(url, f"GET /metrics answered HTTP {response.status_code}")
        return response.text

    async def _snapshot(self, url: str) -> Snapshot:
        try:
            return parse(await self._metrics_text(url))
        except ExpositionError as exc:
            raise CalibrateError(f"{url}/metrics: {exc}") from None

    async def _warm_up(self, server: Server) -> None:
        if self._config.warmup:
            self._say(f"warming up {_describe(server)} ({self._config.warmup} requests)")
            concurrency = min(self._config.warmup, max(self._config.concurrencies))
            await run_load(
                self._config.load(
                    server.url,
                    self._model,
                    concurrency,
                    self._config.temperatures[0],
                    self._config.warmup,
                ),
                transport=self._transport,
            )

    async def _phase(
        self, server: Server, concurrency: int, temperature: float | None
    ) -> tuple[PhaseTiming, Totals]:
        before = CounterReading.of(await self._snapshot(server.url)) if server.k else None
        samples: list[float] = []
        sampler = asyncio.create_task(self._sample_running(server.url, samples))
        try:
            load = await run_load(
                self._config.load(
                    server.url,
                    self._model,
                    concurrency,
                    temperature,
                    self._config.phase_requests(concurrency),
                ),
                transport=self._transport,
            )
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        failed = len(load.results) - load.succeeded
        if failed:
            self._say(f"  {failed} of {len(load.results)} requests failed on {server.url}")
        tpot_ms, measured = mean_tpot_ms(load.results, self._config.tpot_source)
        if tpot_ms is None and self._config.tpot_source == "server" and load.succeeded:
            raise CalibrateError(
                f"{server.url} sends no metrics.mean_itl_ms: start it with "
                "--enable-per-request-metrics, or use --tpot-source client"
            )
        counts = Totals() if before is None else await self._settled_delta(server, before, load)
        timing = PhaseTiming(tpot_ms, measured, fmean(samples) if samples else None)
        return timing, counts

    async def _sample_running(self, url: str, samples: list[float]) -> None:
        """vLLM's num_requests_running every sample_interval, the first after at most
        FIRST_SAMPLE_SECONDS (a phase shorter than the interval still has one); failed samples
        are skipped."""
        delay = min(self._config.sample_interval, FIRST_SAMPLE_SECONDS)
        while True:
            await asyncio.sleep(delay)
            delay = self._config.sample_interval
            with contextlib.suppress(CalibrateError, ExpositionError):
                running = requests_running(await self._metrics_text(url))
                value = running.get(self._model, sum(running.values()) if running else None)
                if value is not None:
                    samples.append(value)

    async def _settled_delta(
        self, server: Server, before: CounterReading, load: LoadResult
    ) -> Totals:
        """The counter delta once vLLM has counted the phase's last step (two equal scrapes
        that hold every generated token the responses reported)."""
        expected = expected_generation_tokens(load.results)
        base = model_totals(before.totals, self._model)
        deadline = time.monotonic() + self._config.settle_timeout
        previous = CounterReading.of(await self._snapshot(server.url))
        while True:
            await asyncio.sleep(self._config.settle_interval)
            current = CounterReading.of(await self._snapshot(server.url))
            if counters_settled(
                base,
                model_totals(previous.totals, self._model),
                model_totals(current.totals, self._model),
                expected,
            ):
                return phase_delta(before, current, self._model)
            if time.monotonic() >= deadline:
                raise CalibrateError(
                    f"{server.url}: the spec counters did not settle within "
                    f"{self._config.settle_timeout:g} s after a phase"
                )
            previous = current


def _describe(server: Server) -> str:
    return "plain server" if server.k is None else f"spec server k={server.k}"

"""The sidecar's HTTP face: /metrics, /healthz, /readyz, the live page at /, /api/report and
/runbook."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from specdec_exporter import __version__
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.probe_parse import ProbeInfo
from specdec_exporter.core.report import bucket_json, rows_to_show
from specdec_exporter.sidecar.explain import PageContext
from specdec_exporter.sidecar.page import PageInputs, refresh_seconds, render_page
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.sidecar.runbook import add_runbook_route
from specdec_exporter.sidecar.sections import LoadLevel, ScrapeStatus, Table, bucket_latencies
from specdec_exporter.term import Cell

Rows = tuple[Sequence[str], Sequence[Sequence[Cell]]]
LandingRows = Callable[[PollState], Rows | None]
"""One table of the page (and of /api/report's ``tables``), from the poll state; None: the table
is not shown now (an empty one says "no data yet")."""


def create_app(
    registry: CollectorRegistry,
    state: PollState,
    not_ready: Callable[[], str | None],
    vllm_url: str,
    extra_tables: Sequence[tuple[str, LandingRows]] = (),
    *,
    refresh_every: float,
    page: PageContext | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """``refresh_every``: the poll interval; the page reloads itself about that often. ``page``:
    c, t and the links the page explains verdicts with; ``clock``: the page's "now"."""
    app = FastAPI(
        title="vllm-specdec-exporter",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    def tables() -> list[Table]:
        makers: list[tuple[str, LandingRows]] = [
            ("Acceptance per model and engine (sidecar window)", report_rows)
        ]
        source = state.temperature_split_source
        if source != "none":
            window_title = f"Acceptance by temperature bucket ({SPLIT_SOURCE_WORDS[source]}, "
            makers.append((window_title + "sidecar window)", bucket_window_rows))
        made = [(title, make(state)) for title, make in [*makers, *extra_tables]]
        return [(title, *rows) for title, rows in made if rows is not None]

    @app.get("/metrics")
    def metrics(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    @app.get("/healthz")
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    @app.get("/readyz")
    def readyz() -> PlainTextResponse:
        reason = not_ready()
        if reason is None:
            return PlainTextResponse("ready\n")
        return PlainTextResponse(f"not ready: {reason}\n", status_code=503)

    def report_json(shown: Sequence[Table]) -> dict[str, Any]:
        covered = state.window_seconds if state.up and state.window_seconds > 0 else None
        return {
            "up": state.up,
            "window_seconds": covered,
            "configured_window_seconds": None if page is None else page.window,
            "scrape": ScrapeStatus.of(state).as_json(clock()),
            "entries": [entry.as_json() for entry in state.report],
            "temperature_split_source": state.temperature_split_source,
            "buckets": [bucket_json(key, entry) for key, entry in state.buckets.items()],
            "batch_buckets": [row.as_json() for row in state.batch_buckets],
            "engine_probe": probe_json(state.probe_seen.info),
            **speculative_json(state),
            "tables": [
                {"title": title, "headers": list(headers), "rows": [list(r) for r in rows]}
                for title, headers, rows in shown
            ],
        }

    @app.get("/", response_class=HTMLResponse)
    def landing() -> HTMLResponse:
        shown = tables()
        inputs = page_inputs(report_json(shown), shown, registry)
        return HTMLResponse(
            render_page(
                state,
                vllm_url,
                inputs,
                refresh=refresh_seconds(refresh_every),
                now=clock(),
                context=page,
            )
        )

    @app.get("/api/report")
    def report() -> JSONResponse:
        """The page's data as JSON (the demo's live table reads it)."""
        return FiniteJSONResponse(report_json(tables()))

    add_runbook_route(app)
    return app


def page_inputs(
    report: Mapping[str, Any], tables: Sequence[Table], registry: CollectorRegistry
) -> PageInputs:
    """The page reads what /api/report says (``temperature_split_source``; ``batch_buckets``, empty
    unless vLLM's /metrics carries the engine probe's batch families) and the latency histograms
    from the registry, whoever feeds them."""
    levels = report.get("batch_buckets")
    source = report.get("temperature_split_source")
    probe = report.get("engine_probe")
    return PageInputs(
        tables,
        bucket_latencies(registry.collect()),
        source if isinstance(source, str) else None,
        [LoadLevel.from_json(item) for item in levels] if levels else None,
        probe if isinstance(probe, Mapping) else None,
    )


class FiniteJSONResponse(JSONResponse):
    """JSON where a number that is not finite is ``null``: JSON has no NaN or Inf, and a figure
    without meaning is absent, never a 500. (The core gives no such figure; this keeps the
    answer valid whatever any other field holds.)"""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            _finite(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def probe_json(info: ProbeInfo | None) -> dict[str, str] | None:
    """The engine probe as the last successful poll of vLLM saw it (None: not there): the labels
    of its info series, as the sidecar mirrors them."""
    if info is None:
        return None
    return dict(zip(names.INFO_LABELS, info.label_values(), strict=True))


SPECULATIVE_KEYS = (
    "speculative_method",
    "speculative_method_source",
    "speculative_config_mismatch",
    "engine_speculative_config",
    "draft_cost_ratio",
    "draft_cost_ratio_source",
)


def speculative_json(state: PollState) -> dict[str, Any]:
    """The method the figures rest on and where it came from (``engine``, ``flag`` or ``none``),
    c, vLLM's speculative config as the engine probe read it, and a flag it contradicts."""
    choice = state.speculative
    if choice is None:  # an app without the engine-config watch (tests): nothing read
        return dict.fromkeys(SPECULATIVE_KEYS) | {"speculative_method_source": "none"}
    return {
        **choice.as_json(),
        "draft_cost_ratio": choice.cost.ratio,
        "draft_cost_ratio_source": choice.cost.source,
    }


REPORT_HEADERS = (
    "model",
    "engine",
    "acceptance rate",
    "mean acceptance length",
    "modelled speedup",
    "drafts/s",
    "verdict",
)
BUCKET_HEADERS = (
    "model",
    "temperature bucket",
    "acceptance rate",
    "mean acceptance length",
    "modelled speedup",
    "drafts/s",
    "verdict",
)


def report_rows(state: PollState) -> Rows:
    rows = [
        (
            e.model_name,
            e.engine,
            e.acceptance_rate,
            e.mean_acceptance_length,
            e.estimated_speedup,
            e.drafts_per_second,
            e.verdict,
        )
        for e in rows_to_show(state.report, lambda e: (e.model_name, e.engine))
    ]
    return REPORT_HEADERS, rows


SPLIT_SOURCE_WORDS = {"probe": "engine probe", "tap": "request tap"}
"""How a table's title names where its temperature split comes from."""


def bucket_window_rows(state: PollState) -> Rows:
    """The temperature split's figures (engine probe or request tap) per bucket over the sidecar
    window, by model."""
    rows = [
        (
            model,
            bucket,
            e.acceptance_rate,
            e.mean_acceptance_length,
            e.estimated_speedup,
            e.drafts_per_second,
            e.verdict,
        )
        for (model, bucket), e in state.buckets.items()  # ordered by model, then bucket
    ]
    return BUCKET_HEADERS, rows

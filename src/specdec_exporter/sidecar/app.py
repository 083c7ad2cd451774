"""The sidecar's HTTP face: /metrics, /healthz, /readyz and a small landing page at /."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from specdec_exporter import __version__
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.term import Cell, format_cell

LandingRows = Callable[[], tuple[Sequence[str], Sequence[Sequence[Cell]]]]


def create_app(
    registry: CollectorRegistry,
    state: PollState,
    not_ready: Callable[[], str | None],
    vllm_url: str,
    extra_tables: Sequence[tuple[str, LandingRows]] = (),
) -> FastAPI:
    app = FastAPI(title="vllm-specdec-exporter", version=__version__, docs_url=None,
                  redoc_url=None, openapi_url=None)

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

    tables: list[tuple[str, LandingRows]] = [
        ("Acceptance per model and engine (sidecar window)", lambda: report_rows(state)),
        *extra_tables]

    @app.get("/", response_class=HTMLResponse)
    def landing() -> HTMLResponse:
        return HTMLResponse(render_landing(state, vllm_url, tables))

    @app.get("/api/report")
    def report() -> JSONResponse:
        """The landing page's data as JSON (the demo's live table reads it)."""
        return JSONResponse({
            "up": state.up,
            "window_seconds": state.window_seconds,
            "entries": [entry.as_json() for entry in state.report],
            "tables": [
                {"title": title, "headers": list(headers), "rows": [list(row) for row in rows]}
                for title, (headers, rows) in ((title, make()) for title, make in tables)
            ],
        })

    return app


REPORT_HEADERS = ("model", "engine", "acceptance rate", "mean acceptance length",
                  "modelled speedup", "drafts/s", "verdict")


def report_rows(state: PollState) -> tuple[Sequence[str], Sequence[Sequence[Cell]]]:
    rows = [
        (e.model_name, e.engine, e.acceptance_rate, e.mean_acceptance_length,
         e.estimated_speedup, e.drafts_per_second, e.verdict)
        for e in state.report
    ]
    return REPORT_HEADERS, rows


def render_landing(state: PollState, vllm_url: str,
                   tables: Sequence[tuple[str, LandingRows]]) -> str:
    status = "up" if state.up else "DOWN"
    sections = "".join(_html_table(title, *rows()) for title, rows in tables)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>vllm-specdec-exporter</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}td.n{text-align:right}</style></head><body>"
        f"<h1>vllm-specdec-exporter {html.escape(__version__)}</h1>"
        f"<p>vLLM at <code>{html.escape(vllm_url)}</code>: <b>{status}</b>; window "
        f"{state.window_seconds:.0f} s.</p>"
        "<p><a href='/metrics'>/metrics</a> · <a href='/healthz'>/healthz</a> · "
        "<a href='/readyz'>/readyz</a></p>"
        f"{sections}</body></html>"
    )


def _html_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(
            f"<td class='n'>{format_cell(v)}</td>" if isinstance(v, int | float)
            else f"<td>{html.escape(format_cell(v))}</td>" for v in row
        ) + "</tr>"
        for row in rows
    ) or f"<tr><td colspan='{len(headers)}'>no data yet</td></tr>"
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"

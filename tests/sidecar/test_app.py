"""The sidecar's HTTP endpoints, through the ASGI transport (no sockets)."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.registry import CollectorRegistry
from test_poller_collector import poll_all

from specdec_exporter.sidecar.app import create_app
from specdec_exporter.sidecar.poller import PollState
from variants import MODEL, capture

pytestmark = pytest.mark.anyio


def client_for(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar")


async def test_metrics_health_and_landing() -> None:
    poller, registry = await poll_all([capture("t0"), capture("t3")])
    app = create_app(registry, poller.state, lambda: None, "http://vllm:8000")
    async with client_for(app) as client:
        metrics = await client.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert f'specdec_drafts_total{{engine="0",model_name="{MODEL}"}} 7380.0' in metrics.text
        openmetrics = await client.get("/metrics",
                                       headers={"Accept": "application/openmetrics-text"})
        assert openmetrics.text.endswith("# EOF\n")
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200
        landing = await client.get("/")
        assert "Acceptance per model and engine" in landing.text
        assert MODEL in landing.text and "healthy" in landing.text
        assert "href='/metrics'" in landing.text
        report = (await client.get("/api/report")).json()
        assert report["up"] is True
        assert report["entries"][-1]["engine"] == "all"
        assert report["entries"][-1]["drafts"] == 7380.0
        assert report["tables"][0]["rows"][-1][:2] == [MODEL, "all"]


async def test_not_ready_until_first_poll_and_healthz_never_depends_on_vllm() -> None:
    app = create_app(CollectorRegistry(), PollState(), lambda: "first poll not done",
                     "http://vllm:8000")
    async with client_for(app) as client:
        readyz = await client.get("/readyz")
        assert (readyz.status_code, readyz.text) == (503, "not ready: first poll not done\n")
        assert (await client.get("/healthz")).status_code == 200
        assert "DOWN" in (await client.get("/")).text


async def test_landing_escapes_model_names() -> None:
    state = PollState()
    app = create_app(CollectorRegistry(), state, lambda: None, "http://x/<script>")
    async with client_for(app) as client:
        assert "<script>" not in (await client.get("/")).text

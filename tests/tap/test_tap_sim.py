"""Accuracy against the vLLM simulator: per-bucket tap counters equal its ground truth exactly
(mixed temperatures, 64 concurrent requests, streaming with and without include_usage, and not)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx
import pytest
from tapfakes import running_tap

from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.devtools.sim import server as sim_server
from specdec_exporter.devtools.sim import settings as sim_settings

pytestmark = pytest.mark.anyio
DEFAULT_TEMPERATURE = 0.6
TEMPERATURES: list[float | None] = [0.0, 1e-6, 0.2, 0.5, None, 0.65, 0.7, 0.9, 1.0, 1.3]
SHAPES: list[dict[str, Any]] = [
    {"stream": False},
    {"stream": True},
    {"stream": True, "stream_options": {"include_usage": True}},
]
REQUESTS = 96
CONCURRENCY = 64


def request_bodies(model: str) -> list[dict[str, Any]]:
    bodies = []
    mixes = itertools.cycle(itertools.product(TEMPERATURES, SHAPES))
    for index in range(REQUESTS):
        temperature, shape = next(mixes)
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": 24 + index % 9,
            "messages": [{"role": "user", "content": f"count {index}"}],
            **shape,
        }
        if temperature is not None:
            body["temperature"] = temperature
        bodies.append(body)
    return bodies


async def send_all(url: str, bodies: list[dict[str, Any]]) -> None:
    limits = httpx.Limits(max_connections=CONCURRENCY)
    gate = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                if body.get("stream"):
                    async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                        assert reply.status_code == 200
                        text = b"".join([piece async for piece in reply.aiter_bytes()])
                    assert text.endswith(b"data: [DONE]\n\n")
                    with_usage = "stream_options" in body
                    assert (b'"usage"' in text) == with_usage  # what the client asked for
                else:
                    reply = await client.post("/v1/chat/completions", json=body)
                    assert reply.status_code == 200

        await asyncio.gather(*(one(body) for body in bodies))


def truth_by_bucket(truth: dict[str, Any], buckets: TemperatureBuckets) -> dict[str, list[int]]:
    totals: dict[str, list[int]] = {}
    for key, entry in truth["by_temperature"].items():
        row = totals.setdefault(buckets.label_for(float(key)), [0, 0, 0, 0])
        for index, name in enumerate(("requests", "drafts", "draft_tokens", "accepted_tokens")):
            row[index] += entry[name]
    return totals


async def test_tap_counts_equal_simulator_ground_truth() -> None:
    config = sim_settings.SimConfig(
        speculative=sim_settings.SpeculativeConfig("ngram", 4),
        per_request_spec_decode_metrics="summary",
        default_temperature=DEFAULT_TEMPERATURE,
        speed=20.0,
        mean_output_tokens=24,
    )
    with sim_server.running_simulator(config) as sim:
        model = sim.config.served_model_name
        async with running_tap(
            upstream_url=sim.url, models=frozenset({model}), default_temperature=DEFAULT_TEMPERATURE
        ) as tap:
            await send_all(tap.url, request_bodies(model))
            async with httpx.AsyncClient() as client:
                truth = (await client.get(f"{sim.url}/sim/ground-truth")).json()
    expected = truth_by_bucket(truth, tap.stats.buckets)
    got = {
        row.temperature_bucket: [row.attributed, row.drafts, row.draft_tokens, row.accepted_tokens]
        for row in tap.stats.bucket_summary()
        if row.requests
    }
    assert got == expected
    assert sum(row[0] for row in got.values()) == REQUESTS  # every request attributed
    assert len(got) == 5  # all five buckets exercised
    assert tap.stats.attributed_draft_tokens(model) == truth["total"]["draft_tokens"]

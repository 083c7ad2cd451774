"""The tap's per-bucket counters as a sidecar exports them: read, difference over a window, show.

`check --sidecar-url` reads them twice, a window apart, to add acceptance per temperature bucket.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specdec_exporter.core.acceptance import counter_delta, ratio
from specdec_exporter.core.verdict import Verdict, verdict
from specdec_exporter.term import render_table

BucketKey = tuple[str, str]
"""(model_name, temperature_bucket)."""
FIELDS = {
    "specdec_request_drafts": "drafts",
    "specdec_request_draft_tokens": "draft_tokens",
    "specdec_request_accepted_tokens": "accepted_tokens",
}


def parse_bucket_counters(text: str) -> dict[BucketKey, dict[str, float]]:
    """Per (model, bucket): drafts, draft_tokens, accepted_tokens, requests, attributed."""
    counters: dict[BucketKey, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name not in FIELDS and name != "specdec_requests":
                continue
            key = (sample.labels["model_name"], sample.labels["temperature_bucket"])
            values = counters.setdefault(key, dict.fromkeys(
                (*FIELDS.values(), "requests", "attributed"), 0.0))
            if name == "specdec_requests":
                values["requests"] += sample.value
                if sample.labels.get("attributed") == "true":
                    values["attributed"] += sample.value
            else:
                values[FIELDS[name]] = sample.value
    return counters


@dataclass(frozen=True)
class BucketWindow:
    model_name: str
    temperature_bucket: str
    requests: float
    attributed: float
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    verdict: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def bucket_deltas(before: dict[BucketKey, dict[str, float]],
                  after: dict[BucketKey, dict[str, float]]) -> list[BucketWindow]:
    """Window counts per bucket (a sidecar restart in between counts as a reset)."""
    rows = []
    for key in sorted(after):
        earlier = before.get(key, {})
        delta = {name: counter_delta(earlier.get(name, 0.0), value)
                 for name, value in after[key].items()}
        rate = ratio(delta["accepted_tokens"], delta["draft_tokens"])
        length = ratio(delta["accepted_tokens"], delta["drafts"])
        rows.append(BucketWindow(
            *key, delta["requests"], delta["attributed"], delta["drafts"], delta["draft_tokens"],
            delta["accepted_tokens"], rate, None if length is None else 1.0 + length,
            verdict(True, delta["drafts"], rate).value))
    return rows


def bucket_table(rows: list[BucketWindow]) -> str:
    headers = ("model", "temperature bucket", "requests", "attributed", "acceptance",
               "mean len", "verdict")
    body = [(r.model_name, r.temperature_bucket, int(r.requests), int(r.attributed),
             r.acceptance_rate, r.mean_acceptance_length,
             r.verdict if r.requests else Verdict.NOT_DRAFTING.value) for r in rows]
    return "Acceptance by temperature bucket (request tap, same window)\n" + render_table(
        headers, body)


class TapReader:
    """GETs a sidecar's /metrics and keeps the tap's per-bucket counters."""

    def __init__(self, client: httpx.AsyncClient, sidecar_url: str) -> None:
        self._client = client
        self._url = sidecar_url.rstrip("/") + "/metrics"

    async def read(self) -> dict[BucketKey, dict[str, float]]:
        response = await self._client.get(self._url, timeout=10)
        response.raise_for_status()
        return parse_bucket_counters(response.text)

"""The tap's per-bucket counters as a sidecar exports them: read, difference over a window, show.

`check --sidecar-url` reads them twice, a window apart, to add acceptance per temperature bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specdec_exporter.core.acceptance import Totals, counter_delta, totals_delta
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import Snapshot
from specdec_exporter.core.report import BucketKey, Entry, bucket_entries, bucket_json
from specdec_exporter.core.verdict import Criteria
from specdec_exporter.deadline import total_deadline
from specdec_exporter.options import DEFAULT_MAX_BODY_BYTES
from specdec_exporter.sidecar.scraper import CappedBody, ScrapeError
from specdec_exporter.term import render_table

REQUESTS = "specdec_requests"
BUILD_INFO = "specdec_build_info"
"""The family every sidecar exports, tap or not: what tells a sidecar's /metrics apart."""
BUCKET_LABELS = ("model_name", "temperature_bucket")
READ_SECONDS = 10.0
"""Deadline of one read of a sidecar's /metrics, the whole answer."""
FIELDS = {
    "specdec_request_drafts": "drafts",
    "specdec_request_draft_tokens": "draft_tokens",
    "specdec_request_accepted_tokens": "accepted_tokens",
}


@dataclass(frozen=True, slots=True)
class BucketCounts:
    """One (model, bucket)'s tap counters: the attributed requests' spec counts, and requests."""

    totals: Totals = field(default_factory=Totals)
    requests: float = 0.0
    attributed: float = 0.0


class NotASidecarError(ValueError):
    """The text is not a specdec-exporter sidecar's /metrics; the message says what is off."""


def parse_bucket_counters(text: str) -> dict[BucketKey, BucketCounts]:
    """Per (model, bucket): drafts, draft and accepted tokens, requests, attributed requests.
    Text that is not an exposition, or a tap family without its labels, raises
    ``NotASidecarError``."""
    counts: dict[BucketKey, dict[str, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        raise NotASidecarError("its /metrics is not Prometheus text") from None
    for family in families:
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name not in FIELDS and name != REQUESTS:
                continue
            if not all(label in sample.labels for label in BUCKET_LABELS):
                raise NotASidecarError(f"its {sample.name} has no {'/'.join(BUCKET_LABELS)}")
            key = (sample.labels["model_name"], sample.labels["temperature_bucket"])
            values = counts.setdefault(
                key, dict.fromkeys((*FIELDS.values(), "requests", "attributed"), 0.0)
            )
            if name == REQUESTS:
                values["requests"] += sample.value
                if sample.labels.get("attributed") == "true":
                    values["attributed"] += sample.value
            else:
                values[FIELDS[name]] = sample.value
    return {
        key: BucketCounts(
            Totals(values["drafts"], values["draft_tokens"], values["accepted_tokens"]),
            values["requests"],
            values["attributed"],
        )
        for key, values in counts.items()
    }


@dataclass(frozen=True)
class BucketRow:
    """One bucket over `check`'s window: its requests, and the same Entry as a model's rows."""

    temperature_bucket: str
    requests: float
    attributed: float
    entry: Entry

    def as_json(self) -> dict[str, Any]:
        key = (self.entry.model_name, self.temperature_bucket)
        counts = {
            "model_name": key[0],
            "temperature_bucket": key[1],
            "requests": self.requests,
            "attributed": self.attributed,
        }
        return {**counts, **bucket_json(key, self.entry)}


def bucket_rows(
    before: dict[BucketKey, BucketCounts],
    after: dict[BucketKey, BucketCounts],
    *,
    snapshot: Snapshot,
    seconds: float,
    cost: DraftCost,
    criteria: Criteria,
) -> list[BucketRow]:
    """Window counts per bucket (a sidecar restart in between counts as a reset), with the
    figures and verdict of ``core.report.bucket_entries``, as the sidecar shows them."""
    earlier = {key: before.get(key, BucketCounts()) for key in after}
    deltas = {
        key: totals_delta(earlier[key].totals, counts.totals) for key, counts in after.items()
    }
    entries = bucket_entries(snapshot, deltas, seconds=seconds, cost=cost, criteria=criteria)
    return [
        BucketRow(
            key[1],
            counter_delta(earlier[key].requests, after[key].requests),
            counter_delta(earlier[key].attributed, after[key].attributed),
            entries[key],
        )
        for key in sorted(after)
    ]


TAP_TITLE = "Acceptance by temperature bucket (request tap, same window)"


def bucket_table(rows: list[BucketRow], title: str = TAP_TITLE) -> str:
    headers = (
        "model",
        "temperature bucket",
        "requests",
        "attributed",
        "acceptance",
        "mean len",
        "speedup*",
        "verdict",
    )
    body = [
        (
            r.entry.model_name,
            r.temperature_bucket,
            int(r.requests),
            int(r.attributed),
            r.entry.acceptance_rate,
            r.entry.mean_acceptance_length,
            r.entry.estimated_speedup,
            r.entry.verdict,
        )
        for r in rows
    ]
    return f"{title}\n" + render_table(headers, body)


class TapReader:
    """GETs a sidecar's /metrics and keeps the tap's per-bucket counters."""

    def __init__(self, client: httpx.AsyncClient, sidecar_url: str) -> None:
        self._client = client
        self._url = sidecar_url.rstrip("/") + "/metrics"

    async def read(self) -> dict[BucketKey, BucketCounts]:
        """The counters, or ``httpx.HTTPError`` (no answer within READ_SECONDS included), or
        ``NotASidecarError`` (a body over DEFAULT_MAX_BODY_BYTES included)."""
        try:
            async with (
                total_deadline(READ_SECONDS),
                self._client.stream("GET", self._url, timeout=READ_SECONDS) as response,
            ):
                response.raise_for_status()
                body = CappedBody(
                    response.headers.get("content-encoding", ""), DEFAULT_MAX_BODY_BYTES
                )
                async for raw in response.aiter_raw():
                    body.feed(raw)
                data = body.finish()
        except ScrapeError as exc:
            raise NotASidecarError(f"its /metrics: {exc.detail}") from None
        text = data.decode("utf-8", errors="replace")
        if not any(line.startswith(BUILD_INFO) for line in text.splitlines()):
            raise NotASidecarError(f"its /metrics has no {BUILD_INFO}")
        return parse_bucket_counters(text)

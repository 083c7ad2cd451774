"""The request tap inside the sidecar: its config and stats built from Settings, its counts handed
to the poller, its tables on the landing page. Imported only when the tap is enabled."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.buckets import TemperatureBuckets
from specdec_exporter.core.report import BucketKey
from specdec_exporter.options import ConfigError
from specdec_exporter.sidecar.app import LandingRows
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.tap.config import TapConfig
from specdec_exporter.tap.proxy import run_tap
from specdec_exporter.tap.request import OTHER_MODEL
from specdec_exporter.tap.stats import RequestStats
from specdec_exporter.term import Cell


def tap_config(settings: Settings) -> TapConfig:
    """What the tap reads of the sidecar's settings; ConfigError without ``--proxy-listen``."""
    address = settings.proxy_address
    if address is None:
        raise ConfigError("the tap needs --proxy-listen HOST:PORT")
    return TapConfig(
        listen=address,
        vllm_url=settings.vllm_url,
        vllm_ssl_context=settings.vllm_ssl_context(),
        default_temperature=settings.request_default_temperature,
        inspect_max_bytes=settings.proxy_inspect_max_bytes,
        timeout=settings.proxy_timeout,
        shutdown_grace=settings.shutdown_grace,
        upstream_idle_timeout=settings.proxy_upstream_idle_timeout,
    )


class TapParts:
    """The tap's stats and what the rest of the sidecar reads of them.

    The poller hands it its state after each successful poll (``attributed``); the tap's k per
    model and its served models are read from that state, the one the poller keeps updating.
    """

    def __init__(self, settings: Settings) -> None:
        """Its stats are not registered: the poller reads them at each poll and the split's
        counters (``split.SplitCounters``) export what the tap counted while it was the
        temperature split's source."""
        self.config = tap_config(settings)
        self._state: PollState | None = None
        self.stats = RequestStats(
            TemperatureBuckets(settings.temperature_buckets), self.num_speculative_tokens
        )
        self.landing_tables: list[tuple[str, LandingRows]] = [
            ("Acceptance by temperature bucket (request tap, since start)", self.bucket_rows),
        ]

    def num_speculative_tokens(self, model: str) -> int | None:
        """k of ``model`` in the last successful poll; None before one, or while vLLM is down."""
        snapshot = None if self._state is None else self._state.snapshot
        return None if snapshot is None else snapshot.num_speculative_tokens(model)

    def served_models(self) -> frozenset[str]:
        """The models the poller keeps per-model tap series for."""
        return frozenset() if self._state is None else self._state.models_seen

    def attributed(self, state: PollState) -> dict[BucketKey, Totals]:
        """Per (model, bucket), the attributed counts so far. The one place the served models'
        per-bucket series are pre-created at 0 (so they exist before the first request), and
        the series of models the poller no longer keeps are dropped (bounded labels)."""
        self._state = state
        served = state.models_seen
        self.stats.retain_models(served | {OTHER_MODEL})
        for model in served:
            self.stats.add_model(model)
        return {
            (row.model_name, row.temperature_bucket): Totals(
                row.drafts, row.draft_tokens, row.accepted_tokens
            )
            for row in self.stats.bucket_summary()
        }

    def bucket_rows(
        self, state: PollState
    ) -> tuple[Sequence[str], Sequence[Sequence[Cell]]] | None:
        """The tap's own counts since start; no table while the engine probe feeds the split
        (the tap's counts are withheld then, so no table shows two figures for one bucket)."""
        if state.temperature_split_source == "probe":
            return None
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
        on_started: Callable[[tuple[str, int]], None],
        draining: asyncio.Event,
        listener: socket.socket | None = None,
    ) -> None:
        """Serve the tap on ``listener`` (bound by ``serve`` before anything starts)."""
        await run_tap(
            self.config,
            self.stats,
            self.served_models,
            on_started,
            draining=draining,
            listener=listener,
        )

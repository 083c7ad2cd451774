"""What every exchange shares: the tap's settings as an exchange reads them, the upstream pool,
the request stats, the model labels and the rate-limited warnings.

A concrete class that knows nothing of client connections or exchanges, so ``exchange`` and its
parts import it without importing ``proxy``; ``proxy.Tap`` extends it with the client connections
and the sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from specdec_exporter.logs import RateLimiter
from specdec_exporter.tap.config import TapConfig
from specdec_exporter.tap.request import model_label
from specdec_exporter.tap.stats import RequestRecord, RequestStats
from specdec_exporter.tap.upstream import Origin, UpstreamPool

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
ERROR_LOG_INTERVAL = 60.0


class TapContext:
    """Settings, stats and the upstream pool, shared by every exchange of one tap."""

    def __init__(
        self, config: TapConfig, stats: RequestStats, known_models: Callable[[], frozenset[str]]
    ) -> None:
        self.stats = stats
        self.buckets = stats.buckets  # one source of labels: the stats' buckets
        self.default_temperature = config.default_temperature
        self.inspect_limit = config.inspect_max_bytes
        self.timeout = config.timeout
        self.origin = Origin.from_url(config.vllm_url)
        self.pool = UpstreamPool(
            self.origin,
            min(CONNECT_TIMEOUT, config.timeout),
            config.vllm_ssl_context,
            config.upstream_idle_timeout,
        )
        self._known_models = known_models
        self._log_limiter = RateLimiter(ERROR_LOG_INTERVAL)

    def model_label(self, model: str | None) -> str:
        """Map a requested model to a served name or ``other`` (whoever runs the tap pre-creates
        the served models' series: the sidecar does at each poll)."""
        try:
            served = self._known_models()
        except Exception:  # the sidecar's callback must not break traffic
            served = frozenset()
        return model_label(model, served)

    def record(self, record: RequestRecord) -> None:
        try:
            self.stats.record(record)
        except Exception:  # fail open: a stats bug must not break traffic
            self.warn("stats", "recording a request failed")

    def warn(self, key: str, message: str) -> None:
        """Log a warning at most once a minute per kind (never with request data)."""
        emit, suppressed = self._log_limiter.allow(key)
        if emit:
            log.warning("tap: %s", message, extra={"suppressed_since_last": suppressed})

"""What the tap is told: ``TapConfig``, built by whoever runs the tap (the sidecar builds it from
its Settings), so the tap reads no other room's settings model."""

from __future__ import annotations

import ssl
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TapConfig:
    """Every setting the tap reads. No defaults here: each is written once, in the settings model
    of whoever builds this."""

    listen: tuple[str, int]
    """Where the tap listens (``--proxy-listen``)."""
    vllm_url: str
    """Where it forwards to (``--vllm-url``)."""
    vllm_ssl_context: ssl.SSLContext
    """How an ``https://`` vLLM is trusted (``--vllm-ca-file``, ``--vllm-client-cert``): the
    scraper's trust, from the same settings."""
    default_temperature: float | None
    """The temperature of a request without one; None leaves vLLM's own fallback."""
    inspect_max_bytes: int
    """Larger request bodies pass through uninspected (``--proxy-inspect-max-bytes``)."""
    timeout: float
    """Seconds an exchange may wait for vLLM (``--proxy-timeout``)."""
    shutdown_grace: float
    """Seconds in-flight exchanges get to finish once draining starts (``--shutdown-grace``)."""
    upstream_idle_timeout: float
    """Seconds an idle pooled connection to vLLM is reused (``--proxy-upstream-idle-timeout``)."""
    # Settings the tap gains go here, each built from its Settings field in
    # sidecar/tap_parts.tap_config.

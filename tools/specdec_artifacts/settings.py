"""The alerting settings: alerts/config.toml read into frozen dataclasses, with test overrides."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_PATH = REPO_ROOT / "alerts" / "config.toml"

Severity = Literal["critical", "warning"]
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


class SettingsError(ValueError):
    """alerts/config.toml is missing a key or holds a bad value."""


@dataclass(frozen=True)
class AlertPolicy:
    severity: Severity
    for_: str


@dataclass(frozen=True)
class SecretRef:
    name: str
    key: str


@dataclass(frozen=True)
class Thresholds:
    acceptance_rate: float
    tail_quantile: float
    tail_acceptance_rate: float
    speedup: float
    acceptance_drop: float
    coverage_ratio: float
    min_draft_tokens_per_second: float
    min_bucket_draft_tokens_per_second: float
    min_bucket_requests_per_second: float
    min_generation_tokens_per_second: float


@dataclass(frozen=True)
class Links:
    runbook: str
    grafana: str
    dashboard_uid: str
    dashboard_slug: str


@dataclass(frozen=True)
class Routing:
    group_by: tuple[str, ...]
    group_wait: str
    group_interval: str
    repeat_interval: str
    pagerduty_receiver: str
    chat_receiver: str
    pagerduty_url: str
    pagerduty_routing_key_file: str
    pagerduty_secret: SecretRef
    slack_api_url_file: str
    slack_secret: SecretRef
    slack_channel: str


@dataclass(frozen=True)
class Settings:
    sidecar_selector: str
    rate_window: str
    comparison_window: str
    comparison_offset: str
    thresholds: Thresholds
    links: Links
    alerts: Mapping[str, AlertPolicy]
    routing: Routing

    def policy(self, alertname: str) -> AlertPolicy:
        try:
            return self.alerts[alertname]
        except KeyError:
            raise SettingsError(f"alerts/config.toml has no [alerts.{alertname}] table") from None


def load(path: Path = CONFIG_PATH) -> Settings:
    """Read and validate the config file."""
    with path.open("rb") as handle:
        raw = tomllib.load(handle)
    try:
        return _from_mapping(raw)
    except KeyError as exc:
        raise SettingsError(f"{path.name}: missing key {exc}") from None


def with_test_overrides(settings: Settings, *, for_: str | None = None,
                        rate_window: str | None = None, group_timing: str | None = None,
                        sidecar_selector: str | None = None) -> Settings:
    """Shorten `for`, windows and Alertmanager timings so a test sees alerts within seconds."""
    alerts = settings.alerts
    if for_ is not None:
        alerts = {name: dataclasses.replace(p, for_=_duration(for_)) for name, p in alerts.items()}
    routing = settings.routing
    if group_timing is not None:
        timing = _duration(group_timing)
        routing = dataclasses.replace(routing, group_wait=timing, group_interval=timing,
                                      repeat_interval="1h")
    return dataclasses.replace(
        settings,
        alerts=alerts,
        routing=routing,
        rate_window=_duration(rate_window) if rate_window else settings.rate_window,
        comparison_window=_duration(rate_window) if rate_window else settings.comparison_window,
        sidecar_selector=sidecar_selector or settings.sidecar_selector,
    )


def _from_mapping(raw: Mapping[str, Any]) -> Settings:
    windows = raw["windows"]
    return Settings(
        sidecar_selector=str(raw["selectors"]["sidecar"]),
        rate_window=_duration(windows["rate"]),
        comparison_window=_duration(windows["comparison"]),
        comparison_offset=_duration(windows["comparison_offset"]),
        thresholds=Thresholds(**{k: float(v) for k, v in raw["thresholds"].items()}),
        links=Links(**raw["links"]),
        alerts={name: _policy(name, table) for name, table in raw["alerts"].items()},
        routing=_routing(raw["alertmanager"]),
    )


def _policy(name: str, table: Mapping[str, Any]) -> AlertPolicy:
    severity = table["severity"]
    if severity not in ("critical", "warning"):
        raise SettingsError(f"[alerts.{name}] severity must be critical or warning: {severity!r}")
    return AlertPolicy(severity=severity, for_=_duration(table["for"]))


def _routing(table: Mapping[str, Any]) -> Routing:
    fields = dict(table)
    fields["group_by"] = tuple(fields["group_by"])
    if "pod" in fields["group_by"]:
        raise SettingsError("[alertmanager] group_by must not contain pod: one page per model")
    fields["pagerduty_secret"] = SecretRef(**fields["pagerduty_secret"])
    fields["slack_secret"] = SecretRef(**fields["slack_secret"])
    return Routing(**fields)


def _duration(value: str) -> str:
    if not _DURATION.match(value):
        raise SettingsError(f"not a Prometheus duration: {value!r}")
    return value

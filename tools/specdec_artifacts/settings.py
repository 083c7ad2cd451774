"""The alerting settings: alerts/config.toml read into frozen pydantic models, with test overrides.

Each model mirrors one table of the file; every value comes from the file, every check is here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from specdec_exporter.core.verdict import ACCEPTANCE_THRESHOLD

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_PATH = REPO_ROOT / "alerts" / "config.toml"

Severity = Literal["critical", "warning"]
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class SettingsError(ValueError):
    """alerts/config.toml is missing a key or holds a bad value."""


def _check_duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"not a Prometheus duration: {value!r}")
    return value


def duration_seconds(value: str) -> float:
    """`1h30m` -> 5400.0."""
    return sum(int(n) * _SECONDS[unit] for n, unit in _DURATION_PART.findall(value))


Duration = Annotated[str, AfterValidator(_check_duration)]
Fraction = Annotated[float, Field(gt=0, le=1)]
PerSecond = Annotated[float, Field(ge=0)]
LabelName = Annotated[str, Field(pattern=r"^([a-zA-Z_][a-zA-Z0-9_]*)?$")]


class _Table(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Selectors(_Table):
    sidecar_job: str = Field(min_length=1, pattern=r'^[^"\\]+$')
    """The job of the sidecar's series (the PodMonitor sets it): the rules select
    `job="<sidecar_job>"`; the dashboard's `sidecar_job` variable opens on it and lists every job
    that carries the sidecar's series."""
    vllm_job: str = Field(min_length=1)
    """The job of vLLM's own series (scraped by Prometheus straight from vLLM): the default of
    the dashboard's `vllm_job` variable, which lists every job those series carry."""
    cluster_label: LabelName
    """The label naming the cluster (Thanos, Mimir); empty: one cluster, no such label."""

    @property
    def sidecar(self) -> str:
        """The matcher of the sidecar's series in the rules."""
        return f'job="{self.sidecar_job}"'


class Windows(_Table):
    rate: Duration
    comparison: Duration
    comparison_offset: Duration


class Thresholds(_Table):
    acceptance_rate: Fraction
    acceptance_rate_by_method: dict[str, Fraction]
    """t per --speculative-method (the sidecar's specdec_speculative_info)."""
    acceptance_rate_by_model: dict[str, Fraction]
    """t per model_name; wins over the method's."""
    tail_quantile: Fraction
    tail_acceptance_rate: Fraction
    acceptance_drop: Fraction
    coverage_ratio: Fraction
    min_draft_tokens_per_second: PerSecond
    min_bucket_draft_tokens_per_second: PerSecond
    min_bucket_requests_per_second: PerSecond
    min_generation_tokens_per_second: PerSecond
    probe_files_failed_poll_share: Fraction
    """The share of the sidecar's polls that could not read the probe's files (--probe-dir)
    above which the files-unreadable ticket fires."""

    @field_validator("acceptance_rate")
    @classmethod
    def _same_as_the_core(cls, value: float) -> float:
        if value != ACCEPTANCE_THRESHOLD:
            raise ValueError(
                f"must equal the verdict's threshold {ACCEPTANCE_THRESHOLD:g} (the default of "
                "`check --threshold`); set acceptance_rate_by_method or _by_model instead"
            )
        return value


class Links(_Table):
    runbook: str
    """The runbook's URL; each alert links to `<runbook>#<alertname lower case>`."""
    grafana: str
    """Grafana's base URL; each alert links to `<grafana>/d/<uid>/<slug>?var-...`."""
    dashboard_uid: str
    dashboard_slug: str

    @field_validator("runbook", "grafana")
    @classmethod
    def _splits_where_kustomize_cuts(cls, value: str) -> str:
        """deploy/monitoring/links replaces these bases at `#`, `/d/` and `"`."""
        for delimiter in ('"', "#", "/d/"):
            if delimiter in value:
                raise ValueError(f"must not contain {delimiter!r}")
        return value


class AlertPolicy(_Table):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    severity: Severity
    for_: Duration = Field(alias="for")
    keep_firing_for: Duration | None = None
    """Hysteresis: keeps a page open through a short recovery, so a wobble is one incident."""


class SecretRef(_Table):
    name: str
    key: str


class Routing(_Table):
    group_by: tuple[str, ...]
    group_wait: Duration
    group_interval: Duration
    repeat_interval: Duration
    pagerduty_receiver: str
    chat_receiver: str
    pagerduty_url: str
    pagerduty_routing_key_file: str
    pagerduty_secret: SecretRef
    slack_api_url_file: str
    slack_secret: SecretRef
    slack_channel: str

    @field_validator("group_by")
    @classmethod
    def _no_pod(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if "pod" in value:
            raise ValueError("must not contain pod: one page per model")
        return value


class ExampleDeployment(_Table):
    speculative_config: dict[str, Any]
    """vLLM's --speculative-config in deploy/; its method is also the sidecar's."""

    @field_validator("speculative_config")
    @classmethod
    def _has_a_method(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("method"), str):
            raise ValueError("needs a string `method`")
        return value

    @property
    def method(self) -> str:
        method: str = self.speculative_config["method"]
        return method


class CalibratedModel(_Table):
    """What `specdec-exporter calibrate --write-config` measured for one model."""

    break_even_acceptance_rate: Annotated[float, Field(ge=0, le=1)]
    draft_cost_ratio: float


class Calibration(_Table):
    models: dict[str, CalibratedModel] = Field(default_factory=dict)


class Settings(_Table):
    selectors: Selectors
    windows: Windows
    thresholds: Thresholds
    links: Links
    alerts: dict[str, AlertPolicy]
    alertmanager: Routing
    example_deployment: ExampleDeployment
    calibration: Calibration = Field(default_factory=Calibration)
    """Written by `calibrate --write-config`: each model's measured break-even is its t, unless
    [thresholds.acceptance_rate_by_model] sets one by hand."""

    @property
    def acceptance_rate_by_model(self) -> dict[str, float]:
        """t per model: the hand-written ones, else the measured break-even (a calibration)."""
        measured = {
            model: entry.break_even_acceptance_rate
            for model, entry in self.calibration.models.items()
        }
        return {**measured, **self.thresholds.acceptance_rate_by_model}

    def policy(self, alertname: str) -> AlertPolicy:
        try:
            return self.alerts[alertname]
        except KeyError:
            raise SettingsError(f"alerts/config.toml has no [alerts.{alertname}] table") from None

    @property
    def cluster(self) -> tuple[str, ...]:
        """The cluster label as a tuple of label names: empty when not configured."""
        return (self.selectors.cluster_label,) if self.selectors.cluster_label else ()


def load(path: Path = CONFIG_PATH) -> Settings:
    """Read and validate the config file; any problem is one SettingsError line."""
    with path.open("rb") as handle:
        try:
            raw = tomllib.load(handle)
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{path.name}: {exc}") from None
    return _validated(raw, path.name)


def with_test_overrides(
    settings: Settings,
    *,
    for_: str | None = None,
    rate_window: str | None = None,
    group_timing: str | None = None,
) -> Settings:
    """Shorten `for`, hysteresis, windows and Alertmanager timings so a test sees alerts within
    seconds. The result is validated like the file."""
    data = settings.model_dump(by_alias=True)
    if for_ is not None:
        for policy in data["alerts"].values():
            policy["for"] = for_
            policy["keep_firing_for"] = for_ if policy["keep_firing_for"] else None
    if rate_window is not None:
        data["windows"]["rate"] = data["windows"]["comparison"] = rate_window
    if group_timing is not None:
        routing = data["alertmanager"]
        routing["group_wait"] = routing["group_interval"] = group_timing
        routing["repeat_interval"] = "1h"
    return _validated(data, "test overrides")


def _validated(raw: dict[str, Any], where: str) -> Settings:
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise SettingsError(f"{where}: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(item) for item in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "missing key"
        parts.append(f"{where}: {message}")
    return "; ".join(parts)

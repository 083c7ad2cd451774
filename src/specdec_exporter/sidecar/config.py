"""The one Settings object: flags and SPECDEC_* environment variables, validated at start-up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    DirectoryPath,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from specdec_exporter.core.buckets import (
    DEFAULT_EDGES,
    TemperatureBuckets,
    is_valid_temperature,
    parse_edges,
)
from specdec_exporter.core.calibration import Calibration
from specdec_exporter.core.model import DraftCost, resolve_draft_cost
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.core.speculative_method import SpeculativeChoice, choose_method
from specdec_exporter.core.verdict import ACCEPTANCE_THRESHOLD, HEALTHY_ABOVE, Criteria
from specdec_exporter.options import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_TEMPERATURE,
    HttpUrl,
    LinkUrl,
    given_as,
    with_variables,
)
from specdec_exporter.trust import VllmTrust

DEFAULT_PORT = 10088
"""The 9100-9999 exporter range of Prometheus' port registry is fully allocated; we use 10088."""

DEFAULT_MAX_MODELS = 64
"""vLLM serves one model per server; a few more cover renames and a shared sidecar."""
DEFAULT_MODEL_EXPIRY = 600.0
"""Seconds of successful polls without a model before its per-model tap series go."""
MAX_BODY_BYTES_LIMIT = 1 << 30
"""The largest cap on a body a person would set, bytes (vLLM's /metrics is ~60 KB)."""
DraftCostRatio = Annotated[float, Field(ge=0, le=10)]
"""c as a person gives it: a drafted token costs at most ten target steps."""
GENERATION_CONFIG_FILE = "generation_config.json"
"""The file in a Hugging Face model folder whose ``temperature`` vLLM applies by default."""


def parse_host_port(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6) into its parts, or raise ValueError."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {value!r}")
    return host.strip("[]") or "0.0.0.0", port


def _check_listen(value: str) -> str:
    parse_host_port(value)
    return value


def load_calibration(path: Path) -> Calibration:
    """Read `calibrate --json`'s file; a bad file is one readable line (ValueError)."""
    try:
        return Calibration.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(item) for item in first["loc"]) or "file"
        raise ValueError(f"{path} is not a calibration: {where}: {first['msg']}") from None


def _check_calibration(path: Path) -> Path:
    load_calibration(path)
    return path


ListenAddress = Annotated[str, AfterValidator(_check_listen)]
CalibrationFile = Annotated[Path, AfterValidator(_check_calibration)]


def read_generation_config_temperature(path: Path | str) -> float | None:
    """``temperature`` from a HF ``generation_config.json`` (a file, or a folder holding one).

    Returns None when the file sets no usable temperature; raises ValueError with a one-line
    message when the file cannot be read or is not a JSON object.
    """
    target = Path(path)
    if target.is_dir():
        target = target / GENERATION_CONFIG_FILE
    try:
        document = json.loads(target.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read generation config {target}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"generation config {target} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"generation config {target} is not JSON: {exc.msg} (line {exc.lineno})"
        ) from None
    if not isinstance(document, dict):
        raise ValueError(f"generation config {target} is not a JSON object")
    value: object = document.get("temperature")
    return float(value) if isinstance(value, int | float) and is_valid_temperature(value) else None


class VllmTarget(BaseSettings, VllmTrust):
    """Which vLLM to read, how to trust it and how its figures are modelled: the settings `run`
    and `check` share."""

    model_config = SettingsConfigDict(
        env_prefix="SPECDEC_",
        extra="forbid",
        frozen=True,
        cli_show_env_vars=True,
        allow_inf_nan=False,  # every number finite: inf and nan are refused, naming the flag
    )

    vllm_url: HttpUrl = Field(
        "http://127.0.0.1:8000", description="base URL of the vLLM server, with or without /v1"
    )
    scrape_timeout: float = Field(
        4.0, ge=0.1, le=600, description="total timeout of one scrape of vLLM, seconds"
    )
    max_body_bytes: int = Field(
        DEFAULT_MAX_BODY_BYTES,
        ge=1024,
        le=MAX_BODY_BYTES_LIMIT,
        description="cap on a /metrics body, bytes",
    )
    probe_dir: DirectoryPath | None = Field(
        None,
        description="the engine probe's own files (vLLM's SPECDEC_PROBE_DIR, a directory both "
        "containers mount): its series are read there; unset, or no live file: from vLLM's "
        "/metrics",
    )
    draft_cost_ratio: DraftCostRatio | None = Field(
        None,
        description="c: cost of one drafted token relative to one target "
        "step; unset: a default by --speculative-method",
    )
    speculative_method: str | None = Field(
        None, description="vLLM's speculative method (eagle3, ngram, ...); picks the default c"
    )
    calibration: CalibrationFile | None = Field(
        None,
        description="`calibrate --json`'s file: c comes from it, measured instead of "
        "assumed (not with --draft-cost-ratio: one source of c)",
    )
    threshold: float = Field(
        ACCEPTANCE_THRESHOLD,
        gt=0,
        le=1,
        description="acceptance below which the verdict is not healthy (t)",
    )
    healthy_above: float = Field(
        HEALTHY_ABOVE, gt=0, le=1, description="top of the borderline band t..healthy-above"
    )

    _calibration: Calibration | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _check_criteria_and_cost(self) -> Self:
        """t within the band, and one source of c (a flag and a calibration contradict)."""
        if self.threshold > self.healthy_above:
            name = given_as(type(self))
            raise ValueError(
                f"{name('threshold')} is {self.threshold:g}, above {name('healthy_above')} "
                f"{self.healthy_above:g}: the borderline band runs from the threshold up to "
                "healthy-above; lower the one or raise the other"
            )
        Criteria(self.threshold, self.healthy_above)
        if self.calibration is not None:
            self._calibration = load_calibration(self.calibration)
        try:
            self.draft_cost_for(None)
        except ValueError as exc:  # the core names the flags; the variables are ours to add
            raise ValueError(with_variables(type(self), str(exc))) from None
        return self

    def draft_cost_for(self, model: str | None) -> DraftCost:
        """c for ``model`` and where it came from (flag, calibration, method default, default);
        a calibration's own entry for the model wins over its top-level figure."""
        calibrated = None if self._calibration is None else self._calibration.cost_ratio_for(model)
        return resolve_draft_cost(self.draft_cost_ratio, self.speculative_method, calibrated)

    def speculative_choice(
        self, engine: EngineSpeculativeConfig | None, model: str | None = None
    ) -> SpeculativeChoice:
        """The method the figures rest on (the flag, else vLLM's config as the engine probe read
        it), where it came from, and c for ``model`` from it."""
        calibrated = None if self._calibration is None else self._calibration.cost_ratio_for(model)
        return choose_method(
            self.speculative_method,
            engine,
            lambda method: resolve_draft_cost(self.draft_cost_ratio, method, calibrated),
        )

    @property
    def loaded_calibration(self) -> Calibration | None:
        """The calibration file's content, read once at start-up (None without --calibration)."""
        return self._calibration

    @property
    def draft_cost(self) -> DraftCost:
        """c for the one model a vLLM serves (see ``draft_cost_for``)."""
        return self.draft_cost_for(None)

    @property
    def criteria(self) -> Criteria:
        return Criteria(self.threshold, self.healthy_above)


class Settings(VllmTarget):
    """Everything the sidecar (`run`) can be told. Flags override environment variables."""

    listen: ListenAddress = Field(
        f"0.0.0.0:{DEFAULT_PORT}", description="HOST:PORT of /metrics, /healthz, /readyz and /"
    )
    listen_head_timeout: float = Field(
        10.0,
        gt=0,
        le=600,
        description="seconds a client of --listen has to send each request's head; a slower "
        "one is closed",
    )
    listen_max_connections: int = Field(
        64,
        gt=0,
        le=100_000,
        description="connections --listen keeps open at most: beyond it the oldest one "
        "still sending its head is closed, or new ones wait",
    )
    listen_fd_reserve: int = Field(
        64,
        ge=0,
        le=100_000,
        description="file descriptors --listen leaves to polling vLLM and to the tap: with "
        "fewer left it accepts no connection",
    )
    interval: float = Field(
        5.0, ge=0.1, le=3600, description="seconds between polls of vLLM's /metrics"
    )
    window: float = Field(
        60.0,
        ge=1,
        le=86400,
        description="window of windowed figures (modelled speedup, tap coverage), seconds",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="JSON log lines on stderr at this level and above"
    )
    log_interval: float = Field(
        60.0, ge=0, le=86400, description="minimum seconds between repeated error log lines"
    )
    shutdown_grace: float = Field(
        20.0,
        ge=0,
        le=3600,
        description="after SIGTERM, seconds in-flight tap requests get to "
        "finish (under Kubernetes' default terminationGracePeriodSeconds of 30)",
    )
    max_models: int = Field(
        DEFAULT_MAX_MODELS,
        gt=0,
        le=10_000,
        description="models whose per-model tap series are kept",
    )
    model_expiry: float = Field(
        DEFAULT_MODEL_EXPIRY,
        ge=1,
        le=30 * 86400,
        description="seconds of successful "
        "polls without a model before its per-model tap series go",
    )
    runbook_url: LinkUrl | None = Field(
        None,
        description="docs/runbook.md as your team reads it; the live page links each verdict "
        "to its section (default: the runbook this sidecar serves at /runbook)",
    )
    grafana_dashboard_url: LinkUrl | None = Field(
        None,
        description="URL of the Grafana dashboard (.../d/vllm-specdec/...); the live page "
        "links each model to it (default: no link)",
    )

    # The request tap.
    proxy_listen: ListenAddress | None = Field(
        None, description="HOST:PORT of the OpenAI-compatible request tap (default: off)"
    )
    default_temperature: float | None = Field(
        None,
        ge=0,
        le=MAX_TEMPERATURE,
        description="temperature vLLM applies when a request has none",
    )
    generation_config: Path | None = Field(
        None, description="generation_config.json (or its folder) to read that default from"
    )
    temperature_buckets: Annotated[tuple[float, ...], NoDecode] = Field(
        DEFAULT_EDGES, description="comma-separated edges of the temperature buckets"
    )
    proxy_inspect_max_bytes: int = Field(
        1024 * 1024,
        ge=1,
        le=MAX_BODY_BYTES_LIMIT,
        description="larger request bodies pass through uninspected, bytes",
    )
    proxy_timeout: float = Field(
        600.0, ge=0.1, le=86400, description="upstream timeout of the tap, seconds"
    )
    proxy_upstream_idle_timeout: float = Field(
        4.0,
        ge=0.1,
        le=3600,
        description="seconds the tap reuses an idle connection to vLLM: keep it under vLLM's "
        "keep-alive (uvicorn's 5 s, VLLM_HTTP_TIMEOUT_KEEP_ALIVE) and any load balancer's",
    )

    _generation_config_temperature: float | None = PrivateAttr(None)

    @field_validator("temperature_buckets", mode="before")
    @classmethod
    def _split_edges(cls, value: Any) -> Any:
        return parse_edges(value) if isinstance(value, str) else value

    @field_validator("temperature_buckets")
    @classmethod
    def _check_edges(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        return TemperatureBuckets(value).edges

    @model_validator(mode="after")
    def _read_generation_config(self) -> Self:
        """Read at start-up, so a missing or broken file is a config error, not a dead tap."""
        if self.generation_config is not None:
            try:
                temperature = read_generation_config_temperature(self.generation_config)
            except ValueError as exc:
                raise ValueError(f"{given_as(type(self))('generation_config')}: {exc}") from None
            self._generation_config_temperature = temperature
        return self

    @property
    def request_default_temperature(self) -> float | None:
        """The temperature of a request without one: ``--default-temperature``, else the
        generation config's; None leaves vLLM's own fallback."""
        if self.default_temperature is not None:
            return self.default_temperature
        return self._generation_config_temperature

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_host_port(self.listen)

    @property
    def proxy_address(self) -> tuple[str, int] | None:
        return parse_host_port(self.proxy_listen) if self.proxy_listen else None

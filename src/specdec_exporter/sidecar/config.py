"""The one Settings object: flags and SPECDEC_* environment variables, validated at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from specdec_exporter.core.calibration import Calibration

DEFAULT_PORT = 10088
"""The 9100-9999 exporter range of Prometheus' port registry is fully allocated; we use 10088."""

DEFAULT_TEMPERATURE_EDGES = (0.5, 0.7, 1.0)


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


def _check_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")


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
HttpUrl = Annotated[str, AfterValidator(_check_url)]
CalibrationFile = Annotated[Path, AfterValidator(_check_calibration)]


class Settings(BaseSettings):
    """Everything the sidecar can be told. Flags override environment variables."""

    model_config = SettingsConfigDict(env_prefix="SPECDEC_", extra="forbid", frozen=True)

    vllm_url: HttpUrl = "http://127.0.0.1:8000"
    listen: ListenAddress = f"0.0.0.0:{DEFAULT_PORT}"
    interval: float = Field(5.0, gt=0, le=3600, description="seconds between polls of vLLM")
    scrape_timeout: float = Field(4.0, gt=0, le=600, description="timeout of one poll")
    window: float = Field(60.0, gt=0, le=86400, description="window of windowed figures, seconds")
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0, description="cap on a /metrics body")
    draft_cost_ratio: float | None = Field(None, ge=0, le=10)
    speculative_method: str | None = None
    calibration: CalibrationFile | None = None
    """`calibrate --json`'s file: c comes from it (measured), before the flag or method default."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_interval: float = Field(60.0, ge=0, description="min seconds between repeated error logs")

    # The request tap (issue 5).
    proxy_listen: ListenAddress | None = None
    default_temperature: float | None = Field(None, ge=0)
    generation_config: Path | None = None
    temperature_buckets: tuple[float, ...] = DEFAULT_TEMPERATURE_EDGES
    proxy_inspect_max_bytes: int = Field(1024 * 1024, gt=0)
    proxy_timeout: float = Field(600.0, gt=0)

    @field_validator("temperature_buckets", mode="before")
    @classmethod
    def _split_edges(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(float(part) for part in value.split(",") if part.strip())
        return value

    @field_validator("temperature_buckets")
    @classmethod
    def _check_edges(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if not value or any(edge <= 0 for edge in value) or list(value) != sorted(set(value)):
            raise ValueError("temperature bucket edges must be positive and strictly increasing")
        return value

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_host_port(self.listen)

    @property
    def proxy_address(self) -> tuple[str, int] | None:
        return parse_host_port(self.proxy_listen) if self.proxy_listen else None


class ConfigError(Exception):
    """A setting is invalid; the message is one readable line."""


def load_settings(**overrides: Any) -> Settings:
    """Build Settings from the environment plus the given (non-None) overrides."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(item) for item in error["loc"]) or "settings"
        parts.append(f"{where}: {error['msg']} (got {error.get('input')!r})")
    return "invalid setting: " + "; ".join(parts)

"""vLLM's own speculative configuration, one type for the probe that reads it from vLLM and for
the sidecar that reads it back from the probe's info series. Standard library only (copied into
vLLM's process); every field is text bounded by ``REASON_LIMIT``, "" when vLLM does not say."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from specdec_exporter.core import probe_names as names


@dataclass(frozen=True, slots=True)
class EngineSpeculativeConfig:
    """The fields of ``vllm_config.speculative_config`` (and the per-request metrics level of
    ``observability_config``) that the figures rest on; ``speculative`` False: vLLM runs without
    ``--speculative-config``."""

    speculative: bool
    method: str = ""
    num_speculative_tokens: str = ""
    draft_model: str = ""
    draft_tensor_parallel_size: str = ""
    num_speculative_tokens_per_batch_size: str = ""
    per_request_metrics: str = ""

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> EngineSpeculativeConfig:
        """Read from vLLM's config object; never raises (a field that cannot be read is "")."""
        speculative = _read(vllm_config, "speculative_config")
        per_request = _text(
            _read(_read(vllm_config, "observability_config"), "per_request_spec_decode_metrics")
        )
        if speculative is None:
            return cls(False, per_request_metrics=per_request)
        return cls(
            True,
            method=_text(_read(speculative, "method")),
            num_speculative_tokens=_text(_read(speculative, "num_speculative_tokens")),
            draft_model=_text(_read(speculative, "model")),
            draft_tensor_parallel_size=_text(_read(speculative, "draft_tensor_parallel_size")),
            num_speculative_tokens_per_batch_size=schedule_text(
                _read(speculative, "num_speculative_tokens_per_batch_size")
            ),
            per_request_metrics=per_request,
        )

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> EngineSpeculativeConfig:
        """From the info series' labels (as any vLLM shows them: each cut to the bound)."""

        def label(name: str) -> str:
            return labels.get(name, "")[: names.REASON_LIMIT]

        return cls(
            label(names.SPECULATIVE) == names.ON,
            method=label(names.METHOD),
            num_speculative_tokens=label(names.NUM_SPECULATIVE_TOKENS),
            draft_model=label(names.DRAFT_MODEL),
            draft_tensor_parallel_size=label(names.DRAFT_TENSOR_PARALLEL_SIZE),
            num_speculative_tokens_per_batch_size=label(
                names.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE
            ),
            per_request_metrics=label(names.PER_REQUEST_METRICS),
        )

    def label_values(self) -> tuple[str, ...]:
        """The info series' label values, in the order of ``SPECULATIVE_CONFIG_LABELS``."""
        return (
            names.ON if self.speculative else names.OFF,
            self.method,
            self.num_speculative_tokens,
            self.draft_model,
            self.draft_tensor_parallel_size,
            self.num_speculative_tokens_per_batch_size,
            self.per_request_metrics,
        )

    @property
    def k(self) -> int | None:
        """num_speculative_tokens as a number (None: not set, or not a positive integer)."""
        text = self.num_speculative_tokens
        return int(text) if text.isdigit() and int(text) > 0 else None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for a log or a terminal: ``method eagle3, k 4, draft model X, draft TP 1,
        per-request metrics summary``; fields vLLM did not give are left out."""
        per_request = f"per-request metrics {self.per_request_metrics or 'unknown'}"
        if not self.speculative:
            return f"no --speculative-config, {per_request}"
        parts = [
            ("method", self.method),
            ("k", self.num_speculative_tokens),
            ("draft model", self.draft_model),
            ("draft TP", self.draft_tensor_parallel_size),
            ("k per batch size", self.num_speculative_tokens_per_batch_size),
        ]
        return ", ".join([f"{name} {value}" for name, value in parts if value] + [per_request])


def schedule_text(value: Any) -> str:
    """vLLM's ``num_speculative_tokens_per_batch_size`` (``[(lo, hi, k), ...]``) as compact
    JSON, "" when unset; anything else as its text. Bounded; never raises."""
    if value is None:
        return ""
    try:
        ranges = [[int(lo), int(hi), int(k)] for lo, hi, k in value]
        text = json.dumps(ranges, separators=(",", ":"))
    except Exception:
        return _text(value)
    return text[: names.REASON_LIMIT]


def _read(source: Any, attribute: str) -> Any:
    """``source.attribute``, or None when it is not there or cannot be read."""
    if source is None:
        return None
    try:
        return getattr(source, attribute, None)
    except Exception:
        return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    try:
        return str(getattr(value, "value", value))[: names.REASON_LIMIT]
    except Exception:
        return ""

"""Which speculative method the figures rest on, and where it came from: the person's
``--speculative-method`` (it wins: a person may know better), else vLLM's own configuration as the
engine probe read it, else none; c follows from the method. A flag that vLLM's config contradicts
is said, never silent. Pure: no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig

MethodSource = Literal["engine", "flag", "none"]
METHOD_SOURCES: tuple[MethodSource, ...] = ("engine", "flag", "none")
MTP = "mtp"
"""vLLM (0.32) replaces every ``*_mtp`` method by ``mtp`` when it reads its config."""


@dataclass(frozen=True, slots=True)
class SpeculativeChoice:
    """The method (None: unknown), its source, c from it, what vLLM's config said (None: no
    engine probe seen) and the disagreement between the flag and vLLM's config, if any."""

    method: str | None
    source: MethodSource
    cost: DraftCost
    engine: EngineSpeculativeConfig | None = None
    mismatch: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The fields `check --json` and /api/report carry."""
        return {
            "speculative_method": self.method,
            "speculative_method_source": self.source,
            "speculative_config_mismatch": self.mismatch,
            "engine_speculative_config": None if self.engine is None else self.engine.as_json(),
        }

    def describe(self) -> str:
        """``method eagle3 (from vLLM's config, read by the engine probe)``, for a terminal."""
        origin = {
            "engine": "from vLLM's config, read by the engine probe",
            "flag": "from --speculative-method",
            "none": "unknown: no --speculative-method and no engine probe config",
        }[self.source]
        return f"method {self.method} ({origin})" if self.method else f"method {origin}"


def choose_method(
    flag: str | None,
    engine: EngineSpeculativeConfig | None,
    cost_of: Callable[[str | None], DraftCost],
) -> SpeculativeChoice:
    """The flag's method, else the engine's, else none; c by ``cost_of(method)`` (the settings'
    resolution: flag, calibration, method default, default). An engine method this version has
    no c for gets the default c, named with the method (never an error: vLLM knows more methods
    than this table)."""
    engine_method = engine.method if engine is not None and engine.speculative else ""
    if flag is not None:
        return SpeculativeChoice(flag, "flag", cost_of(flag), engine, _mismatch(flag, engine))
    if engine_method:
        try:
            cost = cost_of(engine_method)
        except ValueError:  # a method vLLM names and this version does not know
            cost = dataclasses.replace(cost_of(None), method=engine_method)
        return SpeculativeChoice(engine_method, "engine", cost, engine)
    return SpeculativeChoice(None, "none", cost_of(None), engine)


def same_method(a: str, b: str) -> bool:
    """Equal as vLLM reads them (``deepseek_mtp`` is ``mtp``)."""
    return _canonical(a) == _canonical(b)


def _canonical(method: str) -> str:
    return MTP if method.endswith("_" + MTP) else method


def _mismatch(flag: str, engine: EngineSpeculativeConfig | None) -> str | None:
    if engine is None:
        return None
    if not engine.speculative:
        return (
            f"--speculative-method {flag} but vLLM runs without --speculative-config "
            "(the engine probe read its config); the flag wins"
        )
    if engine.method and not same_method(flag, engine.method):
        return (
            f"--speculative-method {flag} but vLLM's own config says {engine.method} "
            "(the engine probe read it); the flag wins"
        )
    return None

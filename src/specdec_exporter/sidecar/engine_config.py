"""The speculative method (and so c) the sidecar's figures rest on, poll by poll: the flag, else
vLLM's own config as the engine probe shows it. Logs the engine probe's state and config when they
change (so the start-up log has them once vLLM first answers) and a flag vLLM contradicts once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from specdec_exporter.core.probe_parse import ProbeInfo, ProbeSnapshot
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.core.speculative_method import SpeculativeChoice

log = logging.getLogger("specdec_exporter.sidecar.engine_config")

Choose = Callable[[EngineSpeculativeConfig | None], SpeculativeChoice]
"""The settings' resolution (``VllmTarget.speculative_choice``)."""


class EngineConfigWatch:
    """The current choice; ``observe`` takes each successful poll's probe families."""

    def __init__(self, choose: Choose) -> None:
        self._choose = choose
        self.choice = choose(None)
        """Before vLLM first answers: the flag's method, or none."""
        self._logged: tuple[ProbeInfo | None, SpeculativeChoice] | None = None
        self._warned: str | None = None

    def observe(self, probe: ProbeSnapshot) -> SpeculativeChoice:
        choice = self.choice = self._choose(probe.speculative_config)
        seen = (probe.info, choice)
        if seen != self._logged:
            self._logged = seen
            message = (
                "engine probe"
                if probe.info
                else "no engine probe on vLLM's /metrics nor in --probe-dir"
            )
            log.info(message, extra=probe_state_fields(probe.info, choice))
        if choice.mismatch is not None and choice.mismatch != self._warned:
            self._warned = choice.mismatch
            log.warning(choice.mismatch, extra={"speculative_config_mismatch": True})
        return choice


def probe_state_fields(info: ProbeInfo | None, choice: SpeculativeChoice) -> dict[str, Any]:
    """The engine probe's state (version, each split and why one is off), vLLM's config as it
    read it, and the method and c the figures rest on: one log line's fields."""
    fields: dict[str, Any] = {"engine_probe": info is not None}
    if info is not None:
        fields.update(
            probe_version=info.version,
            vllm_version=info.vllm_version,
            temperature_split=info.temperature_split,
            batch_split=info.batch_split,
            probe_reason=info.reason,
        )
    if choice.engine is not None:
        fields["engine_speculative_config"] = choice.engine.describe()
    fields.update(
        speculative_method=choice.method,
        speculative_method_source=choice.source,
        draft_cost_ratio=choice.cost.ratio,
        draft_cost_ratio_source=choice.cost.source,
    )
    return fields


def probe_state_lines(info: ProbeInfo | None, choice: SpeculativeChoice) -> list[str]:
    """The engine probe's state, vLLM's speculative config as it read it, and the method and c
    the figures rest on, in words (`check` prints them, the live page joins them)."""
    if info is None:
        lines = ["engine probe: not on vLLM's /metrics nor in --probe-dir"]
    else:
        splits = ", ".join(
            f"{name} split {'on' if on else 'off'}"
            for name, on in (("temperature", info.temperature_split), ("batch", info.batch_split))
        )
        why = f" ({info.reason})" if info.reason else ""
        lines = [f"engine probe {info.version} in vLLM {info.vllm_version}: {splits}{why}"]
    if choice.engine is not None:
        lines.append(f"vLLM's speculative config: {choice.engine.describe()}")
    lines.append(f"figures rest on {choice.describe()}, {choice.cost.describe()}")
    return lines

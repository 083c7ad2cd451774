"""The engine probe's families as the simulator serves them (``simulate --probe``): the real
probe's own ``Families`` (names, labels, HELP, bounds, series made up front) and its per-sequence
arithmetic, fed from the simulated engine's events where vLLM feeds the real one:

- per finished sequence (n = 2 is two), as ``OutputProcessor._update_stats_from_finished`` sees
  it: a sequence the client aborted never passes there, so it is not counted; without
  ``--per-request-spec-decode-metrics`` the temperature split is off and has no series;
- per engine step that drafted (vLLM's ``SchedulerStats.spec_decoding_stats`` is None
  otherwise), bucketed by ``num_running_reqs``, which vLLM takes after the step's finished
  requests have left the running batch.

``tests/real_vllm/test_real_probe_parity.py`` pins the meaning against the real probe in vLLM.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from specdec_exporter import __version__
from specdec_exporter.core.buckets import BatchBuckets, TemperatureBuckets
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig, schedule_text
from specdec_exporter.devtools.sim.settings import SpeculativeConfig
from specdec_exporter.probe.counting import (
    PER_POSITION,
    sequence_figures,
    time_per_output_token,
)
from specdec_exporter.probe.families import Families

NO_SPECULATION = "vLLM runs without --speculative-config"
NO_PER_REQUEST_METRICS = "vLLM runs without --per-request-spec-decode-metrics summary"
SPLIT_OFF_WITHOUT_METRICS = f"temperature split off: {NO_PER_REQUEST_METRICS}"
"""The real probe's info reason when vLLM gives no per-sequence speculative figures."""


def split_problems(speculative: bool, per_request_metrics: bool) -> dict[str, list[str]]:
    """Why each split is off, as the real probe words it (empty lists: both on)."""
    problems: dict[str, list[str]] = {"temperature": [], "batch": []}
    if not speculative:
        for split in problems.values():
            split.append(NO_SPECULATION)
    if not per_request_metrics:
        problems["temperature"].append(NO_PER_REQUEST_METRICS)
    return problems


def engine_speculative_config(
    speculative: SpeculativeConfig | None, per_request_metrics: str
) -> EngineSpeculativeConfig:
    """What the real probe reads from vLLM's config, from the simulator's
    ``--speculative-config`` and ``--per-request-spec-decode-metrics``."""
    if speculative is None:
        return EngineSpeculativeConfig(False, per_request_metrics=per_request_metrics)
    tp = speculative.draft_tensor_parallel_size
    schedule = [(r.lo, r.hi, r.k) for r in speculative.per_batch_size]
    return EngineSpeculativeConfig(
        True,
        method=speculative.method,
        num_speculative_tokens=str(speculative.num_speculative_tokens),
        draft_model=speculative.draft_model or "",
        draft_tensor_parallel_size="" if tp is None else str(tp),
        num_speculative_tokens_per_batch_size=schedule_text(schedule) if schedule else "",
        per_request_metrics=per_request_metrics,
    )


class ProbeSeries:
    """The probe's metric objects in the simulated vLLM's registry (one per (re)start)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        model: str,
        vllm_version: str,
        problems: dict[str, list[str]],
        engines: int,
        positions: int,
        speculative_config: EngineSpeculativeConfig | None = None,
    ) -> None:
        self.model = model
        self.families = Families(registry)
        self.temperatures = None if problems["temperature"] else TemperatureBuckets()
        self.batches = None if problems["batch"] else BatchBuckets()
        self.positions = positions
        if self.temperatures is not None:
            for label in self.temperatures.labels:
                self.families.temperature_series(model, label, positions)
        if self.batches is not None:
            for engine in range(engines):
                for label in self.batches.labels:
                    self.families.batch_series(model, str(engine), label)
        self.families.set_info(__version__, vllm_version, problems)
        if speculative_config is not None:
            self.families.set_speculative_config(speculative_config)

    def record_sequence(
        self,
        temperature: float,
        histogram: list[int],
        draft_tokens: int,
        *,
        ttft: float,
        first_token_at: float,
        last_token_at: float,
        generated: int,
    ) -> None:
        """One finished sequence, with its per-sequence speculative figures."""
        if self.temperatures is None:
            return
        label = self.temperatures.label_for(temperature)
        figures, rate = sequence_figures(histogram, draft_tokens)
        row = self.families.sequence_row(
            self.model, label, max(self.positions, len(figures) - PER_POSITION)
        )
        timing = (ttft, time_per_output_token(first_token_at, last_token_at, generated))
        with self.families.pending_lock:
            row.count(figures, rate, timing)

    def record_step(
        self, engine: int, running: int, drafts: int, draft_tokens: int, accepted: int
    ) -> None:
        """One engine step that drafted."""
        if self.batches is None:
            return
        series = self.families.batch_series(
            self.model, str(engine), self.batches.label_for(running)
        )
        series.steps.inc()
        series.drafts.inc(drafts)
        series.draft_tokens.inc(draft_tokens)
        series.accepted_tokens.inc(accepted)

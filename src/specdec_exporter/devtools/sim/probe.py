"""The engine probe's families as the simulator serves them (``simulate --probe``): the names,
labels and meaning of the real probe (``specdec_exporter.probe``) inside vLLM.

- Per (model_name, temperature_bucket), per finished sequence (n = 2 is two), as the probe sees
  it in ``OutputProcessor._update_stats_from_finished``: a sequence the client aborted never
  passes there, so it is not counted.
- Per (model_name, engine, batch_bucket), per engine step that drafted (vLLM's
  ``SchedulerStats.spec_decoding_stats`` is None otherwise), bucketed by ``num_running_reqs``,
  which vLLM takes after the step's finished requests have left the running batch.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specdec_exporter import __version__
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.buckets import BatchBuckets, TemperatureBuckets
from specdec_exporter.tap.stats import ACCEPTANCE_RATE_BOUNDS, TPOT_BOUNDS, TTFT_BOUNDS

HOOKS = ("finished", "record")
"""The probe's hooks, each with its error counter at 0."""


class ProbeSeries:
    """The probe's metric objects in the simulated vLLM's registry (one per (re)start)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        model: str,
        vllm_version: str,
        temperature_split: bool,
        engines: int,
    ) -> None:
        self.model = model
        self.temperatures = TemperatureBuckets()
        self.batches = BatchBuckets()
        split = [names.MODEL, names.TEMPERATURE_BUCKET]
        batch = [names.MODEL, names.ENGINE, names.BATCH_BUCKET]

        def counter(name: str, help_text: str, labels: list[str]) -> Counter:
            return Counter(name, help_text, labelnames=labels, registry=registry)

        def histogram(name: str, help_text: str, bounds: tuple[float, ...]) -> Histogram:
            return Histogram(name, help_text, labelnames=split, buckets=bounds, registry=registry)

        self.sequences = counter(
            names.SEQUENCES, "Finished sequences (a request with n = 2 is two).", split
        )
        self.spec_sequences = counter(
            names.SPEC_SEQUENCES, "Finished sequences that carried speculative figures.", split
        )
        self.drafts = counter(names.DRAFTS, "Verify steps with draft tokens.", split)
        self.draft_tokens = counter(names.DRAFT_TOKENS, "Draft tokens.", split)
        self.accepted_tokens = counter(names.ACCEPTED_TOKENS, "Accepted draft tokens.", split)
        self.per_position = counter(
            names.ACCEPTED_PER_POSITION,
            "Accepted draft tokens per position.",
            [*split, names.POSITION],
        )
        self.acceptance_rate = histogram(
            names.ACCEPTANCE_RATE, "Acceptance rate per sequence.", ACCEPTANCE_RATE_BOUNDS
        )
        self.ttft = histogram(names.TTFT, "Time to first token per sequence.", TTFT_BOUNDS)
        self.tpot = histogram(names.TPOT, "Time per output token per sequence.", TPOT_BOUNDS)
        self.batch_steps = counter(names.BATCH_STEPS, "Engine steps that drafted.", batch)
        self.batch_drafts = counter(names.BATCH_DRAFTS, "Drafts.", batch)
        self.batch_draft_tokens = counter(names.BATCH_DRAFT_TOKENS, "Draft tokens.", batch)
        self.batch_accepted = counter(names.BATCH_ACCEPTED_TOKENS, "Accepted draft tokens.", batch)
        info = Gauge(
            names.INFO,
            "The engine probe: version, splits on or off, and why one is off; always 1.",
            labelnames=["version", "vllm_version", "temperature_split", "batch_split", "reason"],
            registry=registry,
        )
        state = "on" if temperature_split else "off"
        reason = "" if temperature_split else "--per-request-spec-decode-metrics is none"
        info.labels(__version__, vllm_version, state, "on", reason).set(1)
        errors = counter(names.ERRORS, "Errors inside the probe's hooks, by hook.", [names.HOOK])
        for hook in HOOKS:
            errors.labels(hook)
        for bucket in self.temperatures.labels:
            for family in (
                self.sequences,
                self.spec_sequences,
                self.drafts,
                self.draft_tokens,
                self.accepted_tokens,
                self.acceptance_rate,
                self.ttft,
                self.tpot,
            ):
                family.labels(model, bucket)
        for engine in range(engines):
            for bucket in self.batches.labels:
                for family in (
                    self.batch_steps,
                    self.batch_drafts,
                    self.batch_draft_tokens,
                    self.batch_accepted,
                ):
                    family.labels(model, str(engine), bucket)

    def record_sequence(
        self,
        temperature: float,
        histogram: list[int] | None,
        draft_tokens: int,
        *,
        ttft: float,
        tpot: float,
    ) -> None:
        """One finished sequence; ``histogram`` None: vLLM gave it no speculative figures."""
        bucket = self.temperatures.label_for(temperature)
        labels = (self.model, bucket)
        self.sequences.labels(*labels).inc()
        self.ttft.labels(*labels).observe(ttft)
        self.tpot.labels(*labels).observe(tpot)
        if histogram is None:
            return
        self.spec_sequences.labels(*labels).inc()
        steps = sum(histogram)
        accepted = sum(count * accepted for accepted, count in enumerate(histogram))
        self.drafts.labels(*labels).inc(steps)
        self.draft_tokens.labels(*labels).inc(draft_tokens)
        self.accepted_tokens.labels(*labels).inc(accepted)
        for position in range(len(histogram) - 1):
            self.per_position.labels(*labels, str(position)).inc(sum(histogram[position + 1 :]))
        if draft_tokens:
            self.acceptance_rate.labels(*labels).observe(accepted / draft_tokens)

    def record_step(
        self, engine: int, running: int, drafts: int, draft_tokens: int, accepted: int
    ) -> None:
        """One engine step that drafted."""
        labels = (self.model, str(engine), self.batches.label_for(running))
        self.batch_steps.labels(*labels).inc()
        self.batch_drafts.labels(*labels).inc(drafts)
        self.batch_draft_tokens.labels(*labels).inc(draft_tokens)
        self.batch_accepted.labels(*labels).inc(accepted)

"""`simulate --probe`: the real probe's info and series per configuration, fed by the engine."""

from __future__ import annotations

import httpx

from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.devtools.sim.probe import NO_PER_REQUEST_METRICS, NO_SPECULATION
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, SpeculativeConfig
from specdec_exporter.devtools.sim.telemetry import Telemetry

SPEC = SpeculativeConfig(method="eagle3", num_speculative_tokens=3)


def test_without_the_flag_no_probe_family() -> None:
    assert parse_probe(Telemetry(SimConfig(speculative=SPEC), 0.0).render().decode()).info is None


def test_without_speculation_both_splits_are_off_and_say_why() -> None:
    probe = parse_probe(Telemetry(SimConfig(probe=True), 0.0).render().decode())
    assert probe.info is not None
    assert not probe.temperature_split and not probe.batch_split
    assert probe.info.reason == (
        f"temperature split off: {NO_SPECULATION}, {NO_PER_REQUEST_METRICS}; "
        f"batch split off: {NO_SPECULATION}"
    )
    assert probe.temperature == {} and probe.batch == {}


def test_without_per_request_metrics_only_the_batch_split_is_on() -> None:
    config = SimConfig(probe=True, speculative=SPEC, data_parallel_size=2)
    probe = parse_probe(Telemetry(config, 0.0).render().decode())
    assert not probe.temperature_split and probe.batch_split
    assert probe.temperature == {}
    assert {engine for _, engine, _ in probe.batch} == {"0", "1"}
    assert len(probe.batch) == 2 * 7


def test_sequences_and_steps_sum_to_vllms_counters_and_restart_with_them() -> None:
    config = SimConfig(
        probe=True, speculative=SPEC, per_request_spec_decode_metrics="summary", speed=50
    )
    with running_simulator(config) as sim:
        body = {"prompt": ["a", "b"], "max_tokens": 20, "n": 2, "temperature": 0.9}
        httpx.post(f"{sim.url}/v1/completions", json=body, timeout=60).raise_for_status()
        truth = sim.ground_truth()["total"]
        probe = parse_probe(httpx.get(f"{sim.url}/metrics").text)
        httpx.post(f"{sim.url}/sim/restart", json={}).raise_for_status()
        fresh = parse_probe(httpx.get(f"{sim.url}/metrics").text)
    hot = probe.temperature[(config.served_model_name, "0.7-1.0")]
    assert (hot.sequences, hot.spec_sequences) == (4, 4)
    assert (hot.totals.drafts, hot.totals.draft_tokens, hot.totals.accepted_tokens) == (
        truth["drafts"],
        truth["draft_tokens"],
        truth["accepted_tokens"],
    )
    assert sum(t.drafts for t in probe.batch.values()) == truth["drafts"]
    assert sum(t.steps for t in probe.batch.values()) <= truth["decode_steps"]
    assert all(bucket.sequences == 0 for bucket in fresh.temperature.values())

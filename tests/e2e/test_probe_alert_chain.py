"""The engine probe's health alert, every part real but vLLM: the simulator serves the engine probe
with its temperature split off (vLLM without --per-request-spec-decode-metrics, in the real
probe's words) -> `specdec-exporter run` mirrors it as `specdec_engine_probe_info` -> real
Prometheus (generated rules, short `for`) -> real Alertmanager (generated routing) -> the stub's
chat receiver. One SpecDecodeProbeSplitOff ticket arrives naming the split and the probe's reason;
nothing pages, and SpecDecodeProbeErrors stays silent (no hook failed). This is what ties the
alert's matchers to the labels and values the sidecar really exports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alert_stack import EVENT_TIMEOUT, chat_mentions, instant, running_stack
from monitoring_processes import wait_until

from sidecar_process import sidecar
from specdec_exporter.devtools.sim.probe import SPLIT_OFF_WITHOUT_METRICS
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, SpeculativeConfig

pytestmark = pytest.mark.e2e

SPLIT_OFF, ERRORS = "SpecDecodeProbeSplitOff", "SpecDecodeProbeErrors"


def test_a_split_the_probe_switched_off_reaches_chat_as_one_ticket(tmp_path: Path) -> None:
    config = SimConfig(
        served_model_name="llama-e2e",
        seed=5,
        speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=4),
        per_request_spec_decode_metrics="none",
        probe=True,
    )
    with (
        running_simulator(config) as simulator,
        sidecar(simulator.url, "--speculative-method", "draft_model") as (sidecar_url, _),
        running_stack(tmp_path, [sidecar_url.removeprefix("http://")]) as stack,
    ):
        wait_until(
            lambda: chat_mentions(stack.stub, SPLIT_OFF), EVENT_TIMEOUT, f"{SPLIT_OFF} in chat"
        )
        query = f'ALERTS{{alertstate="firing", alertname="{SPLIT_OFF}"}}'
        firing = instant(stack.prometheus, query)
        errors = instant(stack.prometheus, f'ALERTS{{alertname="{ERRORS}"}}')
        chat = json.dumps([post.body for post in stack.stub.posts("/chat")])
        pages = stack.stub.events()

    assert len(firing) == 1, firing
    labels = firing[0]["metric"]
    assert (labels["temperature_split"], labels["batch_split"]) == ("off", "on")
    assert labels["reason"] == SPLIT_OFF_WITHOUT_METRICS
    assert labels["severity"] == "warning"
    assert SPLIT_OFF_WITHOUT_METRICS in chat
    assert "Acceptance by temperature now comes from the request tap" in chat
    assert "load-level split) is not counted" not in chat
    assert errors == []
    assert pages == [], "a probe split off is a ticket, never a page"

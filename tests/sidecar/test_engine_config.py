"""The poller takes the method, and so c, from vLLM's config as the engine probe shows it, poll by
poll: kept while vLLM does not answer, gone with the probe; the collector and the page follow."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.registry import CollectorRegistry
from test_poller_collector import Clock, ScriptedSource

from probe_text import probe_text
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.speculative_method import SpeculativeChoice
from specdec_exporter.sidecar.collector import SpecDecodeCollector
from specdec_exporter.sidecar.config import VllmTarget
from specdec_exporter.sidecar.engine_config import EngineConfigWatch
from specdec_exporter.sidecar.page import engine_probe_note
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.scraper import ScrapeError
from variants import MODEL, capture

pytestmark = pytest.mark.anyio
ENGINE_CONFIG_LOGGER = "specdec_exporter.sidecar.engine_config"


def chosen(poll: Poller) -> SpeculativeChoice:
    assert poll.state.speculative is not None
    return poll.state.speculative


def poller(bodies: list[str | ScrapeError], **settings: str) -> tuple[Poller, CollectorRegistry]:
    target = VllmTarget(**settings)  # type: ignore[arg-type]
    poller = Poller(
        ScriptedSource(bodies),
        interval=5,
        window=3600,
        cost=target.draft_cost,
        log_interval=60,
        clock=Clock(),
        engine_config=EngineConfigWatch(target.speculative_choice),
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SpecDecodeCollector(
            poller.state, cost=target.draft_cost, method=None, interval=5, window=3600
        )
    )
    return poller, registry


async def test_the_method_follows_the_probe_and_is_kept_while_vllm_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with_probe = capture("t3") + probe_text()  # the probe read draft_model, k = 4
    poll, registry = poller([with_probe, ScrapeError("connect", "refused"), capture("t3")])
    state = poll.state
    assert chosen(poll).source == "none"
    with caplog.at_level(logging.INFO, logger=ENGINE_CONFIG_LOGGER):
        await poll.poll_once()
        assert chosen(poll).source == "engine"
        assert chosen(poll).cost == DraftCost(0.1, "method", "draft_model")
        assert {e.draft_cost_ratio_source for e in state.report} == {"method"}
        labels = {"model_name": MODEL, "method": "draft_model"}
        assert registry.get_sample_value("specdec_speculative_info", labels) == 1
        assert registry.get_sample_value("specdec_draft_cost_ratio", {"source": "method"}) == 0.1
        assert "figures rest on method draft_model (from vLLM&#x27;s config" in (
            engine_probe_note(state)
        )

        await poll.poll_once()  # vLLM does not answer: what it last said stays
        assert chosen(poll).source == "engine"

        await poll.poll_once()  # vLLM back without the probe: nothing names the method
        assert (chosen(poll).method, chosen(poll).source) == (None, "none")
        assert chosen(poll).cost == DraftCost(0.1, "default")
    messages = [r.getMessage() for r in caplog.records if r.name == ENGINE_CONFIG_LOGGER]
    assert messages == ["engine probe", "no engine probe on vLLM's /metrics nor in --probe-dir"]


async def test_a_flag_vllm_contradicts_is_warned_once_over_many_polls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = capture("t3") + probe_text()
    poll, _ = poller([body] * 5, speculative_method="eagle3")
    with caplog.at_level(logging.WARNING, logger=ENGINE_CONFIG_LOGGER):
        for _ in range(5):
            await poll.poll_once()
    assert [r.getMessage() for r in caplog.records if r.name == ENGINE_CONFIG_LOGGER] == [
        "--speculative-method eagle3 but vLLM's own config says draft_model (the engine probe "
        "read it); the flag wins"
    ]
    assert chosen(poll).cost == DraftCost(0.05, "method", "eagle3")
    assert "id='speculative-config-mismatch'" in engine_probe_note(poll.state)

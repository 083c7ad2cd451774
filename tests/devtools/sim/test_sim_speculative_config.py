"""`simulate --probe` serves vLLM's speculative config as the real probe reads it, from its own
--speculative-config and --per-request-spec-decode-metrics."""

from __future__ import annotations

from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config
from specdec_exporter.devtools.sim.telemetry import Telemetry


def served(speculative_config: str | None, per_request: str = "none") -> EngineSpeculativeConfig:
    config = SimConfig(
        probe=True,
        speculative=parse_speculative_config(speculative_config),
        per_request_spec_decode_metrics=per_request,
    )
    read = parse_probe(Telemetry(config, 0.0).render().decode()).speculative_config
    assert read is not None
    return read


def test_a_drafter_with_a_model_and_a_schedule() -> None:
    text = (
        '{"model": "/models/draft", "num_speculative_tokens": 4, '
        '"num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 64, 2]]}'
    )
    assert served(text, "summary") == EngineSpeculativeConfig(
        True, "draft_model", "4", "/models/draft", "1", "[[1,4,4],[5,64,2]]", "summary"
    )


def test_a_model_free_method_names_itself_and_has_no_draft_tp() -> None:
    assert served('{"method": "ngram", "num_speculative_tokens": 3}') == EngineSpeculativeConfig(
        True, "ngram", "3", "ngram", "", "", "none"
    )


def test_without_speculation_the_series_says_off() -> None:
    assert served(None, "detailed") == EngineSpeculativeConfig(
        False, per_request_metrics="detailed"
    )

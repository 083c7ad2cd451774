"""Which method the figures rest on, where it came from, and c from it: literal configs in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.model import DraftCost, resolve_draft_cost
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig, schedule_text
from specdec_exporter.core.speculative_method import choose_method, same_method

EAGLE3 = EngineSpeculativeConfig(True, "eagle3", "4", "yuhuili/EAGLE3", "1", "", "summary")
NO_SPECULATION = EngineSpeculativeConfig(False, per_request_metrics="none")


def by_method(method: str | None) -> DraftCost:
    return resolve_draft_cost(None, method, None)


def test_the_engine_method_gives_its_default_c_with_source_engine() -> None:
    choice = choose_method(None, EAGLE3, by_method)
    assert (choice.method, choice.source, choice.mismatch) == ("eagle3", "engine", None)
    assert choice.cost == DraftCost(0.05, "method", "eagle3")
    assert choice.as_json()["speculative_method_source"] == "engine"
    assert choice.as_json()["engine_speculative_config"]["draft_model"] == "yuhuili/EAGLE3"


def test_no_flag_and_no_probe_is_none_with_the_default_c() -> None:
    choice = choose_method(None, None, by_method)
    assert (choice.method, choice.source, choice.cost) == (None, "none", DraftCost(0.1, "default"))
    assert choice.as_json() == {
        "speculative_method": None,
        "speculative_method_source": "none",
        "speculative_config_mismatch": None,
        "engine_speculative_config": None,
    }


def test_vllm_without_speculation_names_no_method() -> None:
    choice = choose_method(None, NO_SPECULATION, by_method)
    assert (choice.method, choice.source) == (None, "none")


def test_the_flag_wins_but_a_disagreement_is_said() -> None:
    choice = choose_method("ngram", EAGLE3, by_method)
    assert (choice.method, choice.source, choice.cost.ratio) == ("ngram", "flag", 0.01)
    assert choice.mismatch == (
        "--speculative-method ngram but vLLM's own config says eagle3 (the engine probe read "
        "it); the flag wins"
    )
    assert choice.as_json()["speculative_config_mismatch"] == choice.mismatch
    said = choose_method("eagle3", NO_SPECULATION, by_method).mismatch
    assert said is not None and "without --speculative-config" in said


@pytest.mark.parametrize(("flag", "engine"), [("eagle3", "eagle3"), ("deepseek_mtp", "mtp")])
def test_an_agreeing_flag_is_no_mismatch(flag: str, engine: str) -> None:
    config = EngineSpeculativeConfig(True, engine, "2")
    assert choose_method(flag, config, by_method).mismatch is None
    assert same_method(flag, engine)


def test_a_flag_without_a_probe_is_no_mismatch() -> None:
    choice = choose_method("eagle3", None, by_method)
    assert (choice.source, choice.mismatch, choice.cost.ratio) == ("flag", None, 0.05)


def test_an_engine_method_this_version_does_not_know_gets_the_default_c_named() -> None:
    choice = choose_method(None, EngineSpeculativeConfig(True, "dspark9", "4"), by_method)
    assert (choice.method, choice.source) == ("dspark9", "engine")
    assert choice.cost == DraftCost(0.1, "default", "dspark9")
    assert choice.cost.describe() == "c = 0.1 (default, no c assumed for method dspark9)"


def test_c_from_a_calibration_or_a_flag_keeps_its_source_with_the_engine_method() -> None:
    calibrated = choose_method(None, EAGLE3, lambda m: resolve_draft_cost(None, m, 0.07))
    assert calibrated.cost == DraftCost(0.07, "calibration", "eagle3")
    flagged = choose_method(None, EAGLE3, lambda m: resolve_draft_cost(0.2, m, None))
    assert (flagged.cost.source, flagged.source) == ("flag", "engine")


def test_reading_vllms_config_takes_what_is_there_and_leaves_the_rest_empty() -> None:
    full = SimpleNamespace(
        speculative_config=SimpleNamespace(
            method="draft_model",
            num_speculative_tokens=4,
            model="/models/draft",
            draft_tensor_parallel_size=1,
            num_speculative_tokens_per_batch_size=[(1, 4, 4), (5, 64, 2)],
        ),
        observability_config=SimpleNamespace(per_request_spec_decode_metrics="summary"),
    )
    assert EngineSpeculativeConfig.from_vllm_config(full) == EngineSpeculativeConfig(
        True, "draft_model", "4", "/models/draft", "1", "[[1,4,4],[5,64,2]]", "summary"
    )
    old = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=3))
    assert EngineSpeculativeConfig.from_vllm_config(old) == EngineSpeculativeConfig(
        True, num_speculative_tokens="3"
    )
    assert EngineSpeculativeConfig.from_vllm_config(object()) == EngineSpeculativeConfig(False)


class Raising:
    """A config whose every attribute raises on access (a vLLM property gone wrong)."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(name)


def test_a_field_that_raises_is_empty_never_an_error() -> None:
    config = SimpleNamespace(speculative_config=Raising(), observability_config=Raising())
    assert EngineSpeculativeConfig.from_vllm_config(config) == EngineSpeculativeConfig(True)
    assert EngineSpeculativeConfig.from_vllm_config(Raising()) == EngineSpeculativeConfig(False)


def test_every_label_is_bounded() -> None:
    long = "m" * 1000
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(
            model=long, num_speculative_tokens_per_batch_size=[(i, i, 1) for i in range(1, 200)]
        )
    )
    read = EngineSpeculativeConfig.from_vllm_config(config)
    assert len(read.draft_model) == names.REASON_LIMIT
    assert len(read.num_speculative_tokens_per_batch_size) == names.REASON_LIMIT
    labels = dict(zip(names.SPECULATIVE_CONFIG_LABELS, read.label_values(), strict=True))
    assert EngineSpeculativeConfig.from_labels(labels | {names.METHOD: long}).method == (
        "m" * names.REASON_LIMIT
    )
    assert schedule_text("not a schedule") == "not a schedule"
    assert schedule_text(None) == ""


def test_k_and_the_description() -> None:
    assert EAGLE3.k == 4
    assert EngineSpeculativeConfig(True, num_speculative_tokens="x").k is None
    assert EAGLE3.describe() == (
        "method eagle3, k 4, draft model yuhuili/EAGLE3, draft TP 1, per-request metrics summary"
    )
    assert NO_SPECULATION.describe() == "no --speculative-config, per-request metrics none"

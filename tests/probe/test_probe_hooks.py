"""The hooked names, checked against source text (the compatibility script's way) and objects."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

from specdec_exporter.probe import hooks

SOURCES = {
    "vllm.v1.engine.output_processor": """
        class RequestState:
            def __init__(self, request_id, temperature=None):
                self.temperature = temperature
                self.spec_decode_metrics: object = None
                self.stats = None

        class OutputProcessor:
            def _update_stats_from_finished(
                self, req_state, finish_reason, iteration_stats, extra=None
            ):
                pass
    """,
    "vllm.v1.metrics.stats": """
        class RequestSpecDecodeMetrics:
            num_spec_tokens: int
            histogram: list
            num_draft_tokens: int = 0

        class RequestStateStats:
            num_generation_tokens: int = 0
            first_token_latency: float = 0.0
            first_token_ts: float = 0.0
            last_token_ts: float = 0.0

        class SchedulerStats:
            num_running_reqs: int = 0
            spec_decoding_stats: object = None
    """,
    "vllm.v1.metrics.loggers": """
        class StatLoggerBase:
            def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
                ...
    """,
    "vllm.v1.spec_decode.metrics": """
        class SpecDecodingStats:
            num_spec_tokens: int
            num_drafts: int = 0
            num_draft_tokens: int = 0
            num_accepted_tokens: int = 0
    """,
}


def reader(sources: dict[str, str]) -> Callable[[str], str | None]:
    def read(module: str) -> str | None:
        text = sources.get(module)
        return None if text is None else textwrap.dedent(text)

    return read


def test_every_expectation_holds_in_the_0_32_shape() -> None:
    read = reader(SOURCES)
    assert [hooks.check_source(e, read) for e in hooks.EXPECTATIONS] == [None] * 7


def test_a_renamed_parameter_a_missing_attribute_and_a_missing_module_are_named() -> None:
    sources = dict(SOURCES)
    sources["vllm.v1.engine.output_processor"] = (
        SOURCES["vllm.v1.engine.output_processor"]
        .replace("req_state, finish_reason", "state, finish_reason")
        .replace("self.spec_decode_metrics: object = None", "self.spec_metrics = None")
    )
    del sources["vllm.v1.spec_decode.metrics"]
    read = reader(sources)
    problems = [hooks.check_source(e, read) for e in hooks.EXPECTATIONS]
    assert problems == [
        "vllm.v1.engine.output_processor.OutputProcessor._update_stats_from_finished: parameters "
        "(state, finish_reason, iteration_stats, extra), expected (req_state, finish_reason, "
        "iteration_stats, ...)",
        "vllm.v1.engine.output_processor.RequestState: no attribute spec_decode_metrics",
        None,
        None,
        None,
        None,
        "vllm.v1.spec_decode.metrics: no such module",
    ]


def test_the_import_check_reports_an_unimportable_module_per_split() -> None:
    def refuse(name: str) -> object:
        raise ModuleNotFoundError(name)

    problems = hooks.check_imported(import_module=refuse)
    assert problems["temperature"][0] == (
        "vllm.v1.engine.output_processor: cannot import (ModuleNotFoundError)"
    )
    assert len(problems["batch"]) == 3
    assert set(hooks.by_split()) == {"temperature", "batch"}

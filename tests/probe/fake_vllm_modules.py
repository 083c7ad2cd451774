"""A fake ``vllm`` package, built in the test and put into ``sys.modules``: just the names the probe
relies on, shaped as in vLLM 0.32.0 (``changes`` renames or drops some, as a future vLLM might)."""

from __future__ import annotations

import abc
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

VERSION = "0.32.0"


@dataclass
class RequestSpecDecodeMetrics:
    num_spec_tokens: int
    histogram: list[int] = field(default_factory=list)
    num_draft_tokens: int = 0


@dataclass
class RequestStateStats:
    num_generation_tokens: int = 0
    arrival_time: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    first_token_latency: float = 0.0


@dataclass
class SpecDecodingStats:
    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)


@dataclass
class SchedulerStats:
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    spec_decoding_stats: SpecDecodingStats | None = None


class StatLoggerBase(abc.ABC):
    @abc.abstractmethod
    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None: ...

    @abc.abstractmethod
    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None: ...

    @abc.abstractmethod
    def log_engine_initialized(self) -> None: ...


class RequestState:
    def __init__(
        self,
        request_id: str,
        prompt: str | None,
        temperature: float | None,
        spec_decode_metrics: RequestSpecDecodeMetrics | None,
        stats: RequestStateStats | None,
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.temperature = temperature
        self.spec_decode_metrics = spec_decode_metrics
        self.stats = stats


class OutputProcessor:
    def __init__(self) -> None:
        self.finished: list[tuple[Any, Any, Any]] = []

    def _update_stats_from_finished(
        self, req_state: Any, finish_reason: Any, iteration_stats: Any
    ) -> str:
        self.finished.append((req_state, finish_reason, iteration_stats))
        return "vllm's own result"


def _without(cls: type, method: str) -> type:
    """A subclass-free copy of ``cls`` whose ``method`` is gone (a renamed private method)."""
    namespace = {key: value for key, value in vars(cls).items() if key != method}
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    return type(cls.__name__, (), namespace)


class RenamedRequestState:
    """RequestState of a vLLM that renamed ``spec_decode_metrics``."""

    def __init__(self, temperature: float | None, stats: RequestStateStats | None) -> None:
        self.temperature = temperature
        self.spec_decoding = None
        self.stats = stats


def build(changes: frozenset[str] = frozenset()) -> dict[str, types.ModuleType]:
    """Fresh modules; ``changes`` may hold ``"finished-method"`` (renamed), ``"request-state"``
    (attribute renamed), ``"scheduler-stats"`` (num_running_reqs gone)."""

    def module(name: str, **names: Any) -> types.ModuleType:
        made = types.ModuleType(name)
        made.__dict__.update(names)
        return made

    processor: type = type("OutputProcessor", (OutputProcessor,), {})
    if "finished-method" in changes:
        processor = _without(OutputProcessor, "_update_stats_from_finished")
        processor._update_stats_from_finished_v2 = OutputProcessor._update_stats_from_finished  # type: ignore[attr-defined]
    request_state: type = RenamedRequestState if "request-state" in changes else RequestState
    scheduler_stats: type = SchedulerStats
    if "scheduler-stats" in changes:

        @dataclass
        class SchedulerStatsV2:
            num_running: int = 0
            spec_decoding_stats: SpecDecodingStats | None = None

        scheduler_stats = SchedulerStatsV2
    return {
        "vllm": module("vllm", __version__=VERSION + ("+changed" if changes else "")),
        "vllm.v1": module("vllm.v1"),
        "vllm.v1.metrics": module("vllm.v1.metrics"),
        "vllm.v1.metrics.loggers": module("vllm.v1.metrics.loggers", StatLoggerBase=StatLoggerBase),
        "vllm.v1.metrics.stats": module(
            "vllm.v1.metrics.stats",
            RequestSpecDecodeMetrics=RequestSpecDecodeMetrics,
            RequestStateStats=RequestStateStats,
            SchedulerStats=scheduler_stats,
        ),
        "vllm.v1.spec_decode": module("vllm.v1.spec_decode"),
        "vllm.v1.spec_decode.metrics": module(
            "vllm.v1.spec_decode.metrics", SpecDecodingStats=SpecDecodingStats
        ),
        "vllm.v1.engine": module("vllm.v1.engine"),
        "vllm.v1.engine.output_processor": module(
            "vllm.v1.engine.output_processor",
            OutputProcessor=processor,
            RequestState=request_state,
        ),
    }


@contextmanager
def installed(changes: frozenset[str] = frozenset()) -> Iterator[dict[str, types.ModuleType]]:
    """The fake modules in ``sys.modules`` (and the probe's plugin module imported afresh)."""
    modules = build(changes)
    saved = {name: sys.modules.get(name) for name in modules}
    plugin_name = "specdec_exporter.probe.plugin"
    saved_plugin = sys.modules.pop(plugin_name, None)
    sys.modules.update(modules)
    try:
        yield modules
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
        sys.modules.pop(plugin_name, None)
        if saved_plugin is not None:
            sys.modules[plugin_name] = saved_plugin

"""The probe inside a fake vLLM: literal numbers in, literal series out; a changed vLLM, a failing
hook and bad bucket edges leave vLLM running."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import fake_vllm_modules as fake
import pytest
import row_pairs
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from specdec_exporter.core import probe_names as names
from specdec_exporter.probe import counting, families

MODEL = "tiny-llama"


def vllm_config(
    k: int | None = 4, per_request: str = "summary", served: Any = (MODEL, "alias")
) -> Any:
    return SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=list(served)),
        speculative_config=None if k is None else SimpleNamespace(num_speculative_tokens=k),
        observability_config=SimpleNamespace(per_request_spec_decode_metrics=per_request),
    )


class Probe:
    """The plugin module imported into a fake vLLM, with its own registry."""

    def __init__(self, modules: dict[str, ModuleType], registry: CollectorRegistry) -> None:
        self.modules = modules
        self.registry = registry
        self.plugin: Any = importlib.import_module("specdec_exporter.probe.plugin")
        self.plugin.REGISTRY = registry

    def logger(self, engine_index: int = 0, **config: Any) -> Any:
        return self.plugin.SpecdecProbeStatLogger(vllm_config(**config), engine_index)

    def processor(self) -> Any:
        return self.modules["vllm.v1.engine.output_processor"].OutputProcessor()

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def temperature(self, name: str, bucket: str, **labels: str) -> float | None:
        return self.value(name, model_name=MODEL, temperature_bucket=bucket, **labels)

    def info(self) -> dict[str, str]:
        samples = [
            sample
            for metric in self.registry.collect()
            if metric.name == names.INFO
            for sample in metric.samples
        ]
        assert len(samples) == 1 and samples[0].value == 1
        return dict(samples[0].labels)


@pytest.fixture
def probe(request: pytest.FixtureRequest) -> Iterator[Probe]:
    changes = getattr(request, "param", frozenset())
    with fake.installed(changes) as modules:
        yield Probe(modules, CollectorRegistry())


def state(
    temperature: float | None,
    histogram: list[int] | None,
    draft_tokens: int = 0,
    stats: fake.RequestStateStats | None = None,
) -> fake.RequestState:
    metrics = None
    if histogram is not None:
        metrics = fake.RequestSpecDecodeMetrics(len(histogram) - 1, histogram, draft_tokens)
    return fake.RequestState("r", "a secret prompt", temperature, metrics, stats)


def test_one_sequence_adds_what_vllm_counted_for_it(probe: Probe) -> None:
    probe.logger()
    timing = fake.RequestStateStats(
        num_generation_tokens=5, first_token_ts=10.0, last_token_ts=12.0, first_token_latency=0.3
    )
    processor = probe.processor()
    result = processor._update_stats_from_finished(state(0.6, [3, 1, 2, 0, 2], 32, timing), 1, None)

    assert result == "vllm's own result" and len(processor.finished) == 1
    bucket = "0.5-0.7"
    assert probe.temperature("specdec_probe_sequences_total", bucket) == 1
    assert probe.temperature("specdec_probe_spec_sequences_total", bucket) == 1
    assert probe.temperature("specdec_probe_drafts_total", bucket) == 8
    assert probe.temperature("specdec_probe_draft_tokens_total", bucket) == 32
    assert probe.temperature("specdec_probe_accepted_tokens_total", bucket) == 13
    per_position = [
        probe.temperature(
            "specdec_probe_accepted_tokens_per_position_total", bucket, position=str(i)
        )
        for i in range(4)
    ]
    assert per_position == [5, 4, 2, 2]
    assert probe.temperature("specdec_probe_acceptance_rate_sum", bucket) == 13 / 32
    assert probe.temperature("specdec_probe_acceptance_rate_bucket", bucket, le="0.4") == 0
    assert probe.temperature("specdec_probe_acceptance_rate_bucket", bucket, le="0.45") == 1
    assert probe.temperature("specdec_probe_time_to_first_token_seconds_sum", bucket) == 0.3
    assert probe.temperature("specdec_probe_time_per_output_token_seconds_sum", bucket) == 0.5
    for other in ("0", "0-0.5", "0.7-1.0", "1.0+"):
        assert probe.temperature("specdec_probe_sequences_total", other) == 0


def test_buckets_greedy_n2_children_and_sequences_without_figures(probe: Probe) -> None:
    probe.logger()
    processor = probe.processor()
    finish = processor._update_stats_from_finished
    finish(state(0.0, [1, 0, 0, 0, 1], 8), 1, None)  # greedy
    finish(state(1.0, [2, 1, 0, 0, 0], 12), 1, None)  # n = 2: one call per child
    finish(req_state=state(1.0, [0, 0, 0, 0, 3], 12), finish_reason=1, iteration_stats=None)
    finish(state(1.5, None), 1, None)  # no per-sequence figures (flag off for it)
    finish(state(None, None), 1, None)  # a pooling request: no sampled sequence

    assert probe.temperature("specdec_probe_sequences_total", "0") == 1
    assert probe.temperature("specdec_probe_accepted_tokens_total", "0") == 4
    assert probe.temperature("specdec_probe_sequences_total", "0.7-1.0") == 2
    assert probe.temperature("specdec_probe_drafts_total", "0.7-1.0") == 3 + 3
    assert probe.temperature("specdec_probe_draft_tokens_total", "0.7-1.0") == 24
    assert probe.temperature("specdec_probe_accepted_tokens_total", "0.7-1.0") == 1 + 12
    assert probe.temperature("specdec_probe_acceptance_rate_count", "0.7-1.0") == 2
    assert probe.temperature("specdec_probe_sequences_total", "1.0+") == 1
    assert probe.temperature("specdec_probe_spec_sequences_total", "1.0+") == 0
    assert probe.temperature("specdec_probe_drafts_total", "1.0+") == 0
    sequences = sum(
        probe.temperature("specdec_probe_sequences_total", bucket) or 0
        for bucket in ("0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+")
    )
    assert sequences == 4


def test_record_splits_each_step_by_running_batch_and_engine(probe: Probe) -> None:
    loggers = [probe.logger(0), probe.logger(1)]
    step = fake.SpecDecodingStats(4, num_drafts=3, num_draft_tokens=12, num_accepted_tokens=7)
    loggers[0].record(fake.SchedulerStats(num_running_reqs=3, spec_decoding_stats=step), None)
    loggers[0].record(fake.SchedulerStats(num_running_reqs=4, spec_decoding_stats=step), None)
    loggers[1].record(
        fake.SchedulerStats(num_running_reqs=70, spec_decoding_stats=step), None, engine_idx=1
    )
    loggers[0].record(fake.SchedulerStats(num_running_reqs=2), None)  # no drafts this step
    loggers[0].record(None, None)

    def batch(name: str, engine: str, bucket: str) -> float | None:
        return probe.value(name, model_name=MODEL, engine=engine, batch_bucket=bucket)

    assert batch("specdec_probe_batch_steps_total", "0", "2-4") == 2
    assert batch("specdec_probe_batch_drafts_total", "0", "2-4") == 6
    assert batch("specdec_probe_batch_draft_tokens_total", "0", "2-4") == 24
    assert batch("specdec_probe_batch_accepted_tokens_total", "0", "2-4") == 14
    assert batch("specdec_probe_batch_steps_total", "1", "65+") == 1
    assert batch("specdec_probe_batch_steps_total", "1", "1") == 0  # made up front per engine
    assert batch("specdec_probe_batch_steps_total", "0", "65+") == 0


def test_series_are_made_up_front_and_the_info_says_both_splits_are_on(probe: Probe) -> None:
    probe.logger()
    assert probe.info() == {
        "version": importlib.import_module("specdec_exporter").__version__,
        "vllm_version": fake.VERSION,
        "temperature_split": "on",
        "batch_split": "on",
        "reason": "",
    }
    assert probe.value("specdec_probe_errors_total", hook="record") == 0
    assert probe.value("specdec_probe_errors_total", hook="finished") == 0
    assert (
        probe.temperature("specdec_probe_accepted_tokens_per_position_total", "1.0+", position="3")
        == 0
    )
    assert probe.temperature("specdec_probe_time_to_first_token_seconds_count", "0") == 0


def test_the_hook_is_installed_once_per_process(probe: Probe) -> None:
    for engine in range(3):
        probe.logger(engine)
    probe.processor()._update_stats_from_finished(state(0.2, [0, 1], 1), 1, None)
    assert probe.temperature("specdec_probe_sequences_total", "0-0.5") == 1


@pytest.mark.parametrize(
    ("probe", "missing"),
    [
        (frozenset({"finished-method"}), "OutputProcessor._update_stats_from_finished: missing"),
        (frozenset({"request-state"}), "RequestState: no attribute spec_decode_metrics"),
    ],
    indirect=["probe"],
)
def test_changed_private_names_turn_off_only_the_temperature_split(
    probe: Probe, missing: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="vllm.specdec_probe"):
        logger = probe.logger()
        probe.logger(1)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1, lines
    assert caplog.records[0].levelno == logging.WARNING
    assert f"vLLM {fake.VERSION}+changed" in lines[0] and missing in lines[0]
    info = probe.info()
    assert info["temperature_split"] == "off" and info["batch_split"] == "on"
    assert missing in info["reason"]
    assert probe.temperature("specdec_probe_sequences_total", "0") is None
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=2)
    logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=step), None)
    assert (
        probe.value(
            "specdec_probe_batch_accepted_tokens_total",
            model_name=MODEL,
            engine="0",
            batch_bucket="1",
        )
        == 2
    )


@pytest.mark.parametrize("probe", [frozenset({"scheduler-stats"})], indirect=True)
def test_a_changed_scheduler_stats_turns_off_only_the_batch_split(
    probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="vllm.specdec_probe"):
        logger = probe.logger()
    assert len(caplog.records) == 1
    assert "SchedulerStats: no attribute num_running_reqs" in caplog.records[0].getMessage()
    info = probe.info()
    assert (info["temperature_split"], info["batch_split"]) == ("on", "off")
    logger.record(SimpleNamespace(spec_decoding_stats=object()), None)
    assert probe.value("specdec_probe_errors_total", hook="record") == 0


def test_an_error_inside_a_hook_is_counted_never_raised(probe: Probe) -> None:
    logger = probe.logger()
    processor = probe.processor()
    broken = state(0.6, [1, "x", 0, 0, 0], 4)  # type: ignore[list-item]
    assert processor._update_stats_from_finished(broken, 1, None) == "vllm's own result"
    processor._update_stats_from_finished(state(float("nan"), None), 1, None)
    logger.record(SimpleNamespace(spec_decoding_stats=SimpleNamespace()), None)
    assert probe.value("specdec_probe_errors_total", hook="finished") == 2
    assert probe.value("specdec_probe_errors_total", hook="record") == 1
    processor._update_stats_from_finished(state(0.6, [0, 1], 1), 1, None)
    assert probe.temperature("specdec_probe_accepted_tokens_total", "0.5-0.7") == 1


def test_a_hooks_errors_log_one_line_with_the_type_and_place_never_the_message(
    probe: Probe, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A counted error is not silent in vLLM's log either: one line per hook per interval, with
    what and where, but no exception message (it may quote a request)."""
    from specdec_exporter.probe import plugin  # noqa: PLC0415

    logger = probe.logger()
    processor = probe.processor()
    secret = state(0.6, [1, "private prompt text", 0, 0, 0], 4)  # type: ignore[list-item]
    with caplog.at_level("WARNING", logger="vllm.specdec_probe"):
        for _ in range(3):
            processor._update_stats_from_finished(secret, 1, None)
            logger.record(SimpleNamespace(spec_decoding_stats=SimpleNamespace()), None)
            list(probe.registry.collect())  # a scrape counts the sequences the hook left
    lines = sorted(record.getMessage() for record in caplog.records)
    assert len(lines) == 2, lines  # one per hook, not one per error
    assert "AttributeError in its record hook at plugin.py:" in lines[0]
    assert "ValueError in its finished hook at counting.py:" in lines[1]
    assert not any("private" in line or "num_drafts" in line for line in lines)
    assert probe.value("specdec_probe_errors_total", hook="finished") == 3
    monkeypatch.setattr(plugin, "ERROR_LOG_INTERVAL", 0)
    with caplog.at_level("WARNING", logger="vllm.specdec_probe"):
        processor._update_stats_from_finished(secret, 1, None)
        list(probe.registry.collect())
    assert len(caplog.records) == 3  # the interval over: the next error is logged again


@pytest.mark.parametrize(
    ("variable", "value", "off"),
    [
        ("SPECDEC_TEMPERATURE_BUCKETS", "0.5,warm", "temperature_split"),
        ("SPECDEC_TEMPERATURE_BUCKETS", "0.7,0.5", "temperature_split"),
        ("SPECDEC_BATCH_BUCKETS", "4,2", "batch_split"),
        ("SPECDEC_BATCH_BUCKETS", "1.5", "batch_split"),
    ],
)
def test_invalid_edges_give_one_line_and_that_split_off(
    probe: Probe,
    *,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    variable: str,
    value: str,
    off: str,
) -> None:
    monkeypatch.setenv(variable, value)
    with caplog.at_level(logging.INFO, logger="vllm.specdec_probe"):
        probe.logger()
    assert len(caplog.records) == 1
    assert f"invalid {variable}={value!r}" in caplog.records[0].getMessage()
    info = probe.info()
    assert info[off] == "off"
    assert variable in info["reason"]
    other = "batch_split" if off == "temperature_split" else "temperature_split"
    assert info[other] == "on"


def test_edges_come_from_the_environment(probe: Probe, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_TEMPERATURE_BUCKETS", "0.3")
    monkeypatch.setenv("SPECDEC_BATCH_BUCKETS", "2")
    logger = probe.logger()
    probe.processor()._update_stats_from_finished(state(0.6, [0, 1], 1), 1, None)
    assert probe.temperature("specdec_probe_accepted_tokens_total", "0.3+") == 1
    step = fake.SpecDecodingStats(1, num_drafts=1, num_draft_tokens=1, num_accepted_tokens=1)
    logger.record(fake.SchedulerStats(num_running_reqs=5, spec_decoding_stats=step), None)
    assert (
        probe.value(
            "specdec_probe_batch_steps_total", model_name=MODEL, engine="0", batch_bucket="3+"
        )
        == 1
    )


def test_without_the_per_request_flag_the_temperature_split_says_why(probe: Probe) -> None:
    probe.logger(per_request="none")
    info = probe.info()
    assert info["temperature_split"] == "off"
    assert "--per-request-spec-decode-metrics summary" in info["reason"]


def test_without_speculation_both_splits_are_off(probe: Probe) -> None:
    probe.logger(k=None)
    info = probe.info()
    assert (info["temperature_split"], info["batch_split"]) == ("off", "off")
    assert "--speculative-config" in info["reason"]


def test_a_failed_start_leaves_vllm_running(probe: Probe, caplog: pytest.LogCaptureFixture) -> None:
    config = vllm_config()
    del config.model_config.served_model_name
    with caplog.at_level(logging.INFO, logger="vllm.specdec_probe"):
        logger = probe.plugin.SpecdecProbeStatLogger(config, 0)
        assert probe.plugin.SpecdecProbeStatLogger(vllm_config(), 1).state is None
    assert logger.state is None
    assert len(caplog.records) == 1 and "start-up failed" in caplog.records[0].getMessage()
    logger.record(None, None)
    logger.log_engine_initialized()


class Watched:
    """A request state that remembers every attribute read of it."""

    def __init__(self, inner: fake.RequestState) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "read", [])

    def __getattribute__(self, name: str) -> Any:
        if name in ("_inner", "read"):
            return object.__getattribute__(self, name)
        object.__getattribute__(self, "read").append(name)
        return getattr(object.__getattribute__(self, "_inner"), name)


def test_the_probe_never_reads_prompts_or_completions(
    probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    """It reads the temperature, the speculative figures and the timing stats, nothing else."""
    with caplog.at_level(logging.DEBUG):
        probe.logger()
        watched = Watched(state(0.6, [0, 1], 1, fake.RequestStateStats(num_generation_tokens=2)))
        probe.processor()._update_stats_from_finished(watched, 1, None)
    assert set(watched.read) == {"temperature", "spec_decode_metrics", "stats"}
    assert "secret" not in caplog.text


def every_sample(
    registry: CollectorRegistry,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in registry.collect()
        for sample in metric.samples
        if not sample.name.endswith("_created") and metric.name != names.ERRORS
    }


@pytest.mark.parametrize(
    ("histogram", "draft_tokens", "timing"),
    [
        ([1, 2, -1, 0, 0], 8, None),  # a negative count: used to raise after three counters moved
        ([0, 0, 0, 0, 3], 4, None),  # 12 accepted of 4 drafted: the sidecar would drop the bucket
        ([1] * 99, 400, None),  # positions beyond k = 4: used to make series up to position 97
        ([0, 1, 0, 0, 0], -3, None),
        ([0, 1, 0, 0, 0], 4, fake.RequestStateStats(first_token_latency=float("nan"))),
        (
            [0, 1, 0, 0, 0],
            4,
            fake.RequestStateStats(num_generation_tokens=3, first_token_ts=5.0, last_token_ts=1.0),
        ),
        ([True, 1, 0, 0, 0], 4, None),
    ],
)
def test_a_rejected_sequence_moves_nothing_and_is_an_error_of_its_hook(
    probe: Probe, histogram: list[int], draft_tokens: int, timing: fake.RequestStateStats | None
) -> None:
    probe.logger()
    processor = probe.processor()
    processor._update_stats_from_finished(state(0.6, [0, 1, 0, 0, 0], 4), 1, None)
    before = every_sample(probe.registry)

    result = processor._update_stats_from_finished(
        state(0.6, histogram, draft_tokens, timing), 1, None
    )

    assert result == "vllm's own result"
    assert every_sample(probe.registry) == before  # no counter moved, no series was made
    assert probe.value("specdec_probe_errors_total", hook="finished") == 1


@pytest.mark.parametrize(
    "step",
    [
        fake.SchedulerStats(3, spec_decoding_stats=fake.SpecDecodingStats(4, 1, 4, 5)),
        fake.SchedulerStats(3, spec_decoding_stats=fake.SpecDecodingStats(4, 2, -4, 0)),
        fake.SchedulerStats(3, spec_decoding_stats=fake.SpecDecodingStats(4, -1, 4, 1)),
        fake.SchedulerStats(-3, spec_decoding_stats=fake.SpecDecodingStats(4, 1, 4, 1)),
    ],
)
def test_a_rejected_step_moves_nothing(probe: Probe, step: fake.SchedulerStats) -> None:
    logger = probe.logger()
    before = every_sample(probe.registry)
    logger.record(step, None)
    assert every_sample(probe.registry) == before
    assert probe.value("specdec_probe_errors_total", hook="record") == 1


@pytest.mark.parametrize("k", [0, -1, 66, 10**6, "4", 4.0, True])
def test_a_k_the_probe_cannot_use_turns_off_the_temperature_split_only(
    probe: Probe, k: Any
) -> None:
    probe.logger(k=k)
    info = probe.info()
    assert (info["temperature_split"], info["batch_split"]) == ("off", "on")
    assert "cannot read k" in info["reason"]
    assert not any(
        sample.name.startswith(names.ACCEPTED_PER_POSITION) for sample in every_sample_list(probe)
    )


def every_sample_list(probe: Probe) -> list[Any]:
    return [sample for metric in probe.registry.collect() for sample in metric.samples]


@pytest.mark.parametrize(
    ("variable", "value", "off"),
    [
        ("SPECDEC_BATCH_BUCKETS", "inf", "batch_split"),  # used to end the whole probe
        ("SPECDEC_BATCH_BUCKETS", "1,4,1e309", "batch_split"),
        ("SPECDEC_TEMPERATURE_BUCKETS", "0.5,inf", "temperature_split"),
        ("SPECDEC_TEMPERATURE_BUCKETS", "nan", "temperature_split"),
        (
            "SPECDEC_TEMPERATURE_BUCKETS",
            ",".join(str(i + 1) for i in range(2000)),
            "temperature_split",
        ),
        ("SPECDEC_BATCH_BUCKETS", ",".join(str(i) for i in range(1, 18)), "batch_split"),
        ("SPECDEC_TEMPERATURE_BUCKETS", "0.5,٣", "temperature_split"),
    ],
)
def test_any_edge_failure_switches_off_that_split_only(
    probe: Probe,
    *,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    variable: str,
    value: str,
    off: str,
) -> None:
    monkeypatch.setenv(variable, value)
    with caplog.at_level(logging.INFO, logger="vllm.specdec_probe"):
        logger = probe.logger()
    assert logger.state is not None
    assert len(caplog.records) == 1
    assert f"invalid {variable}=" in caplog.records[0].getMessage()
    info = probe.info()  # the info series exists: the split-off alert can fire
    assert info[off] == "off" and variable in info["reason"]
    assert len(info["reason"]) <= names.REASON_LIMIT
    other = "batch_split" if off == "temperature_split" else "temperature_split"
    assert info[other] == "on"


@pytest.mark.parametrize("variable", ["SPECDEC_TEMPERATURE_BUCKETS", "SPECDEC_BATCH_BUCKETS"])
def test_an_empty_variable_means_the_defaults_as_for_the_sidecar(
    probe: Probe, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "  ")
    probe.logger()
    assert probe.info()["reason"] == ""
    assert probe.temperature("specdec_probe_sequences_total", "0.7-1.0") == 0


def test_a_step_with_a_negative_count_is_an_error_never_a_decrement(probe: Probe) -> None:
    """A step's amounts wait as plain ints before they go into the counters: a negative one
    (which ``Counter.inc`` would refuse later, in another step's flush) is refused at once."""
    logger = probe.logger()
    good = fake.SpecDecodingStats(4, num_drafts=2, num_draft_tokens=8, num_accepted_tokens=5)
    bad = fake.SpecDecodingStats(4, num_drafts=2, num_draft_tokens=8, num_accepted_tokens=-5)
    logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=good), None)
    logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=bad), None)
    batch = {"model_name": MODEL, "engine": "0", "batch_bucket": "1"}
    assert probe.value("specdec_probe_batch_accepted_tokens_total", **batch) == 5
    assert probe.value("specdec_probe_batch_steps_total", **batch) == 1
    assert probe.value("specdec_probe_errors_total", hook="record") == 1


def test_the_per_step_lookup_cache_is_bounded_and_counts_the_same_past_it(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe.plugin, "STEP_ROWS_LIMIT", 3)
    logger = probe.logger()
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=2)
    for running in (*range(1, 41), *range(1, 41)):
        logger.record(fake.SchedulerStats(num_running_reqs=running, spec_decoding_stats=step), None)
    logger.state.drain()
    assert len(logger.state.step_rows) == 3

    def steps(bucket: str) -> float | None:
        return probe.value(
            "specdec_probe_batch_steps_total", model_name=MODEL, engine="0", batch_bucket=bucket
        )

    assert [steps(b) for b in ("1", "2-4", "5-8", "9-16", "17-32", "33-64")] == [
        2,
        6,
        8,
        16,
        32,
        16,
    ]
    assert (
        probe.value(
            "specdec_probe_batch_accepted_tokens_total",
            model_name=MODEL,
            engine="0",
            batch_bucket="33-64",
        )
        == 32
    )


def stored(probe: Probe, family: str, *labels: str) -> float:
    """A counter child's value as stored, without a scrape (a scrape flushes the rows)."""
    metric = probe.plugin._STATE.families
    child = getattr(metric, family).labels(*labels)
    return float(child._value.get())


def test_one_api_server_counts_in_plain_ints_and_a_scrape_flushes_them(probe: Probe) -> None:
    """With one API server the hooks add to plain ints and floats (no prometheus_client call on
    vLLM's path); a scrape of the registry moves them into the children first: exact, no lag."""
    logger = probe.logger()
    assert logger.state.flush_in_hooks is False
    processor = probe.processor()
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    finishing = SimpleNamespace(finished_requests=["a finished request's stats"])
    for _ in range(3):
        logger.record(fake.SchedulerStats(num_running_reqs=3, spec_decoding_stats=step), finishing)
    processor._update_stats_from_finished(state(0.0, [1, 1, 0, 0, 2], 12), 1, None)
    logger.log()
    assert stored(probe, "batch_steps", MODEL, "0", "2-4") == 0  # still pending
    assert stored(probe, "drafts", MODEL, "0") == 0
    batch = {"model_name": MODEL, "engine": "0", "batch_bucket": "2-4"}
    assert probe.value("specdec_probe_batch_steps_total", **batch) == 3  # the scrape flushed
    assert probe.value("specdec_probe_batch_accepted_tokens_total", **batch) == 9
    assert probe.temperature("specdec_probe_drafts_total", "0") == 4
    assert probe.temperature("specdec_probe_accepted_tokens_total", "0") == 9
    assert stored(probe, "batch_steps", MODEL, "0", "2-4") == 3
    assert probe.value("specdec_probe_errors_total", hook="record") == 0


def test_under_multiprocess_the_hooks_flush_by_the_step_that_finishes_a_request(
    probe: Probe,
) -> None:
    """Under PROMETHEUS_MULTIPROC_DIR vLLM's /metrics reads the files, never this process's
    registry: the rows go into the counters at the first step that finishes a request (this
    logger records before vLLM's Prometheus logger counts it finished), at vLLM's periodic log()
    and at least every STEP_FLUSH_EVERY steps; the finished sequences with them."""
    logger = probe.logger()
    logger.state.flush_in_hooks = True  # as under PROMETHEUS_MULTIPROC_DIR: its own hook
    logger.record = probe.plugin.step_hook(logger.state)
    processor = probe.processor()
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    running = SimpleNamespace(finished_requests=[])
    finishing = SimpleNamespace(finished_requests=["a finished request's stats"])

    def steps() -> float:
        return stored(probe, "batch_steps", MODEL, "0", "2-4")

    for _ in range(5):
        logger.record(fake.SchedulerStats(num_running_reqs=3, spec_decoding_stats=step), running)
    processor._update_stats_from_finished(state(0.0, [1, 1, 0, 0, 2], 12), 1, None)
    assert steps() == 0  # pending
    assert stored(probe, "drafts", MODEL, "0") == 0
    logger.record(fake.SchedulerStats(num_running_reqs=3, spec_decoding_stats=step), finishing)
    assert steps() == 6
    assert stored(probe, "batch_accepted_tokens", MODEL, "0", "2-4") == 18
    assert stored(probe, "drafts", MODEL, "0") == 4

    logger.record(fake.SchedulerStats(num_running_reqs=3, spec_decoding_stats=step), running)
    logger.log()
    assert steps() == 7

    for _ in range(probe.plugin.STEP_FLUSH_EVERY):
        logger.record(fake.SchedulerStats(num_running_reqs=3, spec_decoding_stats=step), running)
    assert steps() == 7 + probe.plugin.STEP_FLUSH_EVERY
    assert probe.value("specdec_probe_errors_total", hook="record") == 0


def test_iteration_stats_without_finished_requests_flush_every_step(probe: Probe) -> None:
    """Under PROMETHEUS_MULTIPROC_DIR, a vLLM whose IterationStats lost ``finished_requests``:
    the probe cannot tell when a request finishes, so every step goes into the counters at
    once (exact, as before)."""
    logger = probe.logger()
    logger.state.flush_in_hooks = True  # as under PROMETHEUS_MULTIPROC_DIR: its own hook
    logger.record = probe.plugin.step_hook(logger.state)
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=step), object())
    assert stored(probe, "batch_steps", MODEL, "0", "1") == 1


def test_a_flushed_row_gives_what_prometheus_clients_own_updates_give(probe: Probe) -> None:
    """SequenceRow adds per bucket (bisect_left, the bucket Histogram.observe picks) and flushes
    once: at each bound, between, below, above and infinite, every count is what inc/observe
    one by one give, and each sum equal to within float rounding."""
    registry = CollectorRegistry()
    ours, theirs = families.Families(registry), families.Families(CollectorRegistry())
    row = ours.sequence_row("m", "b", 2)
    series = theirs.temperature_series("m", "b", 2)
    row_pairs.count_both(row, series, (*row_pairs.AMOUNTS, float("inf")))
    ours.flush()

    def samples(of: families.Families) -> dict[tuple[str, str | None, str | None], float]:
        return {
            (sample.name, sample.labels.get("le"), sample.labels.get("position")): sample.value
            for family in (
                of.sequences,
                of.spec_sequences,
                of.drafts,
                of.draft_tokens,
                of.accepted_tokens,
                of.accepted_per_position,
                of.acceptance_rate,
                of.ttft,
                of.tpot,
            )
            for metric in family.collect()
            for sample in metric.samples
            if not sample.name.endswith("_created")
        }

    mine, reference = samples(ours), samples(theirs)
    assert mine.keys() == reference.keys()
    for key, value in reference.items():
        if key[0].endswith("_sum"):
            assert mine[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert mine[key] == value, key
    assert not any(row._counters) and not any(row._histograms)  # flushed
    ours.flush()  # nothing pending: nothing moves
    assert samples(ours) == mine


def test_prometheus_client_internals_that_differ_switch_the_splits_off(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows reach prometheus_client's value objects (``_value``, ``_buckets``, ``_sum``);
    a prometheus_client without them gets both splits off with the reason, vLLM unharmed.
    The probe's first rows are the check (no throwaway registry: under
    PROMETHEUS_MULTIPROC_DIR any value made is a series in the process's file)."""

    def differ(children: object) -> None:
        raise TypeError("a Counter child without _value.inc")

    monkeypatch.setattr(families, "_counter_values", differ)
    logger = probe.logger()
    assert probe.info()["temperature_split"] == probe.info()["batch_split"] == "off"
    problem = "prometheus_client's internals differ (a Counter child without _value.inc)"
    assert probe.info()["reason"] == (
        f"temperature split off: {problem}; batch split off: {problem}"
    )
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=step), None)
    assert probe.value("specdec_probe_errors_total", hook="record") == 0


def test_a_histogram_whose_internals_differ_switches_the_temperature_split_off_alone(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    def differ(child: object, bounds: object) -> None:
        raise TypeError("a Histogram child without _upper_bounds, _buckets and _sum")

    monkeypatch.setattr(families, "_histogram_values", differ)
    logger = probe.logger()
    assert (probe.info()["temperature_split"], probe.info()["batch_split"]) == ("off", "on")
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=step), None)
    batch = {"model_name": MODEL, "engine": "0", "batch_bucket": "1"}
    assert probe.value("specdec_probe_batch_steps_total", **batch) == 1


def test_a_scrape_while_the_hooks_count_loses_nothing(probe: Probe) -> None:
    """vLLM serves /metrics from a worker thread while its loop thread runs the hooks: the
    rows are flushed under the lock the hooks take, so every count arrives exactly once."""
    import threading  # noqa: PLC0415

    logger = probe.logger()
    processor = probe.processor()
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            list(probe.registry.collect())

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for _ in range(3000):
            logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=step), None)
            processor._update_stats_from_finished(state(0.0, [1, 1, 0, 0, 2], 12), 1, None)
    finally:
        done.set()
        scraper.join()
    batch = {"model_name": MODEL, "engine": "0", "batch_bucket": "1"}
    assert probe.value("specdec_probe_batch_steps_total", **batch) == 3000
    assert probe.value("specdec_probe_batch_accepted_tokens_total", **batch) == 9000
    assert probe.temperature("specdec_probe_sequences_total", "0") == 3000
    assert probe.temperature("specdec_probe_accepted_tokens_total", "0") == 27000


def test_a_sequence_with_a_negative_count_is_an_error_and_adds_nothing(probe: Probe) -> None:
    probe.logger()
    processor = probe.processor()
    processor._update_stats_from_finished(state(0.0, [1, 1, 0, 0, 0], -4), 1, None)
    assert probe.value("specdec_probe_errors_total", hook="finished") == 1
    assert probe.temperature("specdec_probe_sequences_total", "0") == 0
    assert probe.temperature("specdec_probe_drafts_total", "0") == 0


def test_with_nobody_scraping_a_hook_drains_at_the_inbox_limit(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hooks keep references to vLLM's figure objects until a scrape counts them; with
    nobody scraping, the inboxes stay bounded: a hook drains at INBOX_LIMIT items."""
    monkeypatch.setattr(probe.plugin, "INBOX_LIMIT", 8)
    logger = probe.logger()
    processor = probe.processor()
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    for _ in range(20):
        logger.record(fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=step), None)
        processor._update_stats_from_finished(state(0.0, [1, 1, 0, 0, 2], 12), 1, None)
        assert len(logger.state.steps) < 8 and len(logger.state.finished) < 8
    counted = stored(probe, "batch_steps", MODEL, "0", "1")  # drained by hooks, no scrape
    assert counted >= 8 and counted + len(logger.state.steps) == 20
    counted = stored(probe, "sequences", MODEL, "0")
    assert counted >= 8 and counted + len(logger.state.finished) == 20
    item = logger.state.finished[0]
    assert [type(part) for part in item] == [float, fake.RequestSpecDecodeMetrics, type(None)]


def test_a_hook_never_waits_for_a_scrape_that_is_draining(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the inbox limit a hook drains only if nobody else is: it never blocks vLLM's loop on
    the lock a scrape holds (the scrape counts the items)."""
    import threading  # noqa: PLC0415

    monkeypatch.setattr(probe.plugin, "INBOX_LIMIT", 2)
    logger = probe.logger()
    step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
    stats = fake.SchedulerStats(num_running_reqs=1, spec_decoding_stats=step)
    with logger.state.families.pending_lock:  # a scrape draining now
        hook = threading.Thread(target=lambda: [logger.record(stats, None) for _ in range(5)])
        hook.start()
        hook.join(timeout=10)
        assert not hook.is_alive()
    assert len(logger.state.steps) == 5  # five steps, none counted yet
    assert (
        probe.value(
            "specdec_probe_batch_steps_total", model_name=MODEL, engine="0", batch_bucket="1"
        )
        == 5
    )


def test_under_multiprocess_sequences_are_flushed_with_the_batch_split_off(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEC_BATCH_BUCKETS", "not-a-list")
    logger = probe.logger()
    logger.state.flush_in_hooks = True  # as under PROMETHEUS_MULTIPROC_DIR: its own hook
    logger.record = probe.plugin.step_hook(logger.state)
    assert logger.state.batch_buckets is None
    probe.processor()._update_stats_from_finished(state(0.0, [1, 1, 0, 0, 2], 12), 1, None)
    assert stored(probe, "drafts", MODEL, "0") == 0
    logger.record(fake.SchedulerStats(num_running_reqs=1), SimpleNamespace(finished_requests=[1]))
    assert stored(probe, "drafts", MODEL, "0") == 4


def test_a_temperature_seen_before_finds_its_row_in_one_lookup_and_the_lookups_are_bounded(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only floats are remembered, at most ``TEMPERATURES_LIMIT``; past it, and for an int, the
    long way counts the same; a bool or a NaN is an error of its hook even once 1.0 is known."""
    monkeypatch.setattr(probe.plugin, "TEMPERATURES_LIMIT", 2)
    logger = probe.logger()
    processor = probe.processor()
    for temperature in (0.6, 1.0, 0.65, 0.0, 0.6, 1.0, 1, 0.65, 0.0):
        processor._update_stats_from_finished(state(temperature, None), 1, None)
    for bad in (True, float("nan"), -0.5, float("inf")):
        processor._update_stats_from_finished(state(bad, None), 1, None)
    logger.state.drain()

    assert list(logger.state.row_by_temperature) == [0.6, 1.0]
    sequences = {
        bucket: probe.temperature("specdec_probe_sequences_total", bucket)
        for bucket in ("0", "0.5-0.7", "0.7-1.0", "1.0+")
    }
    assert sequences == {"0": 2, "0.5-0.7": 4, "0.7-1.0": 3, "1.0+": 0}
    assert probe.value("specdec_probe_errors_total", hook="finished") == 4


TIMES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-3, max_value=10**6),
    st.booleans(),
    st.none(),
    st.just("0.5"),
)


@settings(max_examples=300, deadline=None)
@given(
    latency=TIMES,
    first=TIMES,
    last=TIMES,
    tokens=st.one_of(st.integers(min_value=-2, max_value=10**4), st.booleans(), TIMES),
)
def test_any_timing_is_counted_as_the_checked_functions_say(
    latency: Any, first: Any, last: Any, tokens: Any
) -> None:
    """The short way for vLLM's float times and int token count gives what ``counting.seconds``,
    ``count`` and ``time_per_output_token`` give, for anything a request's stats may carry: the
    same TTFT and TPOT, or an error of the hook with nothing moved."""
    try:
        expected: tuple[float, float] | None = (
            counting.seconds(latency),
            counting.seconds(counting.time_per_output_token(first, last, counting.count(tokens))),
        )
    except Exception:
        expected = None
    stats = fake.RequestStateStats(
        num_generation_tokens=tokens,
        first_token_ts=first,
        last_token_ts=last,
        first_token_latency=latency,
    )
    with fake.installed() as modules:
        probe = Probe(modules, CollectorRegistry())
        logger = probe.logger()
        probe.processor()._update_stats_from_finished(state(0.0, None, stats=stats), 1, None)
        logger.state.drain()
        errors = probe.value("specdec_probe_errors_total", hook="finished")
        ttft = probe.temperature("specdec_probe_time_to_first_token_seconds_sum", "0")
        tpot = probe.temperature("specdec_probe_time_per_output_token_seconds_sum", "0")
        counted = probe.temperature("specdec_probe_sequences_total", "0")
    if expected is None:
        assert (errors, counted, ttft, tpot) == (1, 0, 0, 0)
    else:
        assert (errors, counted, ttft, tpot) == (0, 1, *expected)

"""The temperature list, the metrics URL and the load config of one phase."""

from __future__ import annotations

import pytest

from specdec_exporter.devtools.load.mix import MixEntry
from specdec_exporter.devtools.sweep.config import (
    SweepConfig,
    TemperatureListError,
    parse_temperatures,
)


def test_temperatures_keep_the_order_given() -> None:
    assert parse_temperatures("0,0.4,0.8,1.0") == (0.0, 0.4, 0.8, 1.0)
    assert parse_temperatures(" 1.0 , 0 ") == (1.0, 0.0)
    assert parse_temperatures("0,default") == (0.0, None)
    assert parse_temperatures("DEFAULT") == (None,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty entry"),
        ("0,,1", "empty entry"),
        ("0,0.0", "0.0 given twice"),
        ("default,default", "default given twice"),
        ("-0.1", "finite number >= 0"),
        ("nan", "finite number >= 0"),
        ("inf", "finite number >= 0"),
        ("0.7:2", "not a number: '0.7:2'"),
        ("hot", "not a number: 'hot'"),
    ],
)
def test_bad_temperature_lists_say_why(text: str, message: str) -> None:
    with pytest.raises(TemperatureListError, match=message):
        parse_temperatures(text)


@pytest.mark.parametrize(
    ("url", "metrics_url", "expected"),
    [
        ("http://vllm:8000", None, "http://vllm:8000"),
        ("http://vllm:8000/v1/", None, "http://vllm:8000"),
        ("http://tap:8001", "http://vllm:8000", "http://vllm:8000"),
        ("http://tap:8001", "http://vllm:8000/metrics", "http://vllm:8000"),
        ("http://tap:8001", "http://vllm:8000/", "http://vllm:8000"),
    ],
)
def test_metrics_base_url(url: str, metrics_url: str | None, expected: str) -> None:
    assert SweepConfig(url=url, metrics_url=metrics_url).metrics_base_url == expected


def test_each_phase_is_one_temperature_with_the_same_seed() -> None:
    config = SweepConfig(
        url="http://vllm:8000",
        requests=7,
        concurrency=3,
        max_tokens=32,
        stream=True,
        seed=99,
        api_key="sk-x",
        prompts=("a", "b"),
    )
    phase = config.phase_load(0.8, "m")
    assert phase.mix == (MixEntry(0.8, 1.0),)
    assert (phase.requests, phase.concurrency, phase.max_tokens, phase.model) == (7, 3, 32, "m")
    assert (phase.stream_share, phase.include_usage, phase.endpoint) == (1.0, True, "chat")
    assert (phase.seed, phase.prompts, phase.api_key) == (99, ("a", "b"), "sk-x")
    assert config.phase_load(None, None).mix == (MixEntry(None, 1.0),)
    assert SweepConfig().phase_load(0.0, None).stream_share == 0.0
    assert config.total_requests == 7 * 4
    assert "sk-x" not in repr(config)


@pytest.mark.parametrize(
    "overrides",
    [
        {"temperatures": ()},
        {"requests": 0},
        {"concurrency": 0},
        {"prompts": ()},
        {"source": "guess"},
        {"settle_interval": 0.0},
    ],
)
def test_invalid_configs_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"must|needed"):
        SweepConfig(**overrides)  # type: ignore[arg-type]

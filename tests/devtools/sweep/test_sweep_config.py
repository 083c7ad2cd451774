"""The metrics URL, the load config of one phase, and the checks of a sweep built in Python."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specdec_exporter.devtools.load.mix import MixEntry
from specdec_exporter.devtools.sweep.config import SweepConfig


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
    ("overrides", "message"),
    [
        ({"temperatures": ()}, "temperatures: Tuple should have at least 1 item"),
        ({"requests": 0}, "requests: Input should be greater than or equal to 1"),
        ({"concurrency": 0}, "concurrency: Input should be greater than or equal to 1"),
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"prompts": ()}, "prompts: Tuple should have at least 1 item"),
        ({"source": "guess"}, "source: Input should be 'auto', 'per-request' or 'counters'"),
        ({"settle_timeout": -1.0}, "settle_timeout: Input should be greater than or equal to 0"),
        ({"settle_interval": 0.0}, "settle_interval: Input should be greater than 0"),
        ({"url": "vllm:8000"}, "url: Value error, expected an http:// or https:// URL"),
    ],
)
def test_invalid_configs_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        SweepConfig(**overrides)  # type: ignore[arg-type]
    assert refused.value.error_count() == 1
    error = refused.value.errors()[0]
    assert f"{error['loc'][0]}: {error['msg']}".startswith(message)


def test_sweep_and_calibrate_hand_their_timeout_to_every_request() -> None:
    """`--timeout` bounds each request of a sweep and of a calibration as it does `load`'s
    (600 s unless given): a stalled server fails a request, never holds the run."""
    from specdec_exporter.devtools.calibrate.runner import CalibrateConfig  # noqa: PLC0415

    url = "http://127.0.0.1:8000"
    assert SweepConfig(url=url).phase_load(0.0, "m").timeout == 600
    assert SweepConfig(url=url, timeout=7).phase_load(0.0, "m").timeout == 7
    calibrate = CalibrateConfig(spec_urls=(url,), base_url=url, timeout=7)
    assert calibrate.load(url, "m", 1, 0.0, 1).timeout == 7

"""`specdec-exporter simulate`: flags to SimConfig, readable errors, and a real start-up."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from specdec_exporter import cli
from specdec_exporter.commands.simulate import build_config, configure
from specdec_exporter.devtools.sim.settings import SpeculativeConfig


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(argv)


def test_vllm_flags_map_onto_the_config() -> None:
    config = build_config(
        parse(
            "--port",
            "0",
            "--served-model-name",
            "m",
            "--speculative-config",
            '{"method": "eagle3", "num_speculative_tokens": 3}',
            "--per-request-spec-decode-metrics",
            "detailed",
            "--enable-force-include-usage",
            "--data-parallel-size",
            "2",
            "--metric-names",
            "underscore",
            "--speed",
            "4",
            "--drafter-quality",
            "0.5",
            "--seed",
            "9",
            "--no-chunk-merging",
        )
    )
    assert config.speculative == SpeculativeConfig(
        method="eagle3", num_speculative_tokens=3, draft_tensor_parallel_size=1
    )
    assert (config.served_model_name, config.per_request_spec_decode_metrics) == ("m", "detailed")
    assert config.enable_force_include_usage and config.multiprocess_metrics
    assert (config.metric_names, config.speed, config.drafter_quality, config.seed) == (
        "underscore",
        4.0,
        0.5,
        9,
    )
    assert not config.chunk_merging
    assert config.effective_draft_miss_rate == 0.0


def test_defaults_are_vllm_defaults() -> None:
    config = build_config(parse())
    assert (config.host, config.port) == ("127.0.0.1", 8000)
    assert config.speculative is None
    assert config.per_request_spec_decode_metrics == "none"
    assert config.default_temperature == 1.0


def test_generation_config_folder_sets_the_default_temperature(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6, "top_p": 0.9}')
    assert build_config(parse("--generation-config", str(tmp_path))).default_temperature == 0.6
    assert (
        build_config(
            parse("--generation-config", str(tmp_path), "--default-temperature", "0.2")
        ).default_temperature
        == 0.2
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--speculative-config", "{oops"],
        ["--drafter-quality", "1.5"],
        ["--speed", "0"],
        ["--generation-config", "/nonexistent/folder"],
    ],
)
def test_bad_flags_exit_64_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["simulate", *argv]) == 64
    error = capsys.readouterr().err
    assert error.startswith("specdec-exporter simulate: ") and error.count("\n") == 1


def test_the_command_serves_until_terminated() -> None:
    command = [
        sys.executable,
        "-m",
        "specdec_exporter.cli",
        "simulate",
        "--port",
        "0",
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 4}',
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        match = re.search(r"at (http://\S+) \(model ", line)
        assert match is not None, line
        assert httpx.get(f"{match.group(1)}/health", timeout=5.0).status_code == 200
    finally:
        process.terminate()
        code = process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
    assert code in (0, -15)  # uvicorn re-raises SIGTERM after a clean stop

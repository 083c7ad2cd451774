"""Helpers of the calibrate tests: simulator configs and an in-process `calibrate` run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specdec_exporter.cli import main
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config
from specdec_exporter.devtools.sim.steptime import StepTimeModel

SERVER_TIMED = {
    "enable_per_request_metrics": True,
    "modelled_clock": True,
    "mean_output_tokens": 100_000,
}
"""Per-request timings in modelled step time, every request runs to max_tokens."""


def spec_config(
    k: int, *, method: str = "draft_model", step_time: StepTimeModel | None = None, **fields: Any
) -> SimConfig:
    text = json.dumps({"method": method, "model": "draft", "num_speculative_tokens": k})
    return SimConfig(speculative=parse_speculative_config(text), step_time=step_time, **fields)


def calibrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `specdec-exporter calibrate ARGS` in this process; exit code, stdout, stderr."""
    capsys.readouterr()
    code = main(["calibrate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def calibrate_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = calibrate(capsys, *args, "--json")
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document

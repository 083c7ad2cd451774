"""SPECDEC_TEMPERATURE_BUCKETS and SPECDEC_BATCH_BUCKETS mean one thing to the sidecar and to the
engine probe (issue 27 item 7): one parser, core/buckets.py. Empty means the defaults for both
(tests/probe/test_probe_plugin.py holds the probe's side); a value either refuses is refused by the
other, the sidecar with one line and exit 64."""

from __future__ import annotations

import os
import subprocess

import pytest

from sidecar_process import SPECDEC, sidecar_process
from specdec_exporter.core.buckets import DEFAULT_EDGES, parse_edges


def test_an_empty_variable_starts_the_sidecar_with_the_default_edges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It used to exit 64 ("at least one edge is needed") where the probe took the defaults."""
    monkeypatch.setenv("SPECDEC_TEMPERATURE_BUCKETS", "")
    with sidecar_process("http://127.0.0.1:9") as running:
        running.address("metrics")  # started: the settings were accepted
        assert running.stop(timeout=15) == 0
    assert parse_edges("") == parse_edges(" ") == DEFAULT_EDGES


@pytest.mark.parametrize(
    "value",
    ["inf", "0.5,1e309", "nan", "0.5,٣", ",".join(f"0.{i:02d}1" for i in range(17))],
)
def test_a_value_the_probe_refuses_is_refused_by_the_sidecar_in_one_line(value: str) -> None:
    done = subprocess.run(
        [*SPECDEC, "run", "--vllm-url", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"],
        env={**os.environ, "SPECDEC_TEMPERATURE_BUCKETS": value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 64, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SPECDEC_TEMPERATURE_BUCKETS" in lines[0], lines
    assert "Traceback" not in done.stderr

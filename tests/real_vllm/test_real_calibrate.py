"""Real vLLM: calibrate against the spec server and the plain one; figures equal what was counted,
and check with the calibration gives the verdict its measured c implies.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from real_vllm.conftest import announcer
from real_vllm.traffic import MODEL, NUM_SPEC_TOKENS
from specdec_exporter.cli import main
from specdec_exporter.core.acceptance import Totals, sum_totals
from specdec_exporter.core.parse import parse

pytestmark = pytest.mark.real_vllm

CONCURRENCY = (1, 4)
TEMPERATURES = (0.0, 1.0)
REQUESTS = 8
"""Per phase: 8 phases of 8 requests of 64 tokens, about a minute of measurement here."""


def spec_counts(url: str) -> Totals:
    text = httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    return sum_totals(parse(text).counters.values())


@pytest.fixture(scope="module")
def calibrated(
    request: pytest.FixtureRequest,
    real_vllm: Any,
    real_vllm_nospec: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, Any], Totals, Path]]:
    """One calibration; the spec server's counter delta over it; the file written."""
    say = announcer(request.config)
    say("calibrate: spec vs plain server, concurrency 1 and 4, T=0 and 1.0")
    before = spec_counts(real_vllm.url)
    path = tmp_path_factory.mktemp("calibrate") / "calibration.json"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(
            [
                "calibrate",
                "--spec-url",
                real_vllm.url,
                "--base-url",
                real_vllm_nospec.url,
                "--concurrency",
                ",".join(map(str, CONCURRENCY)),
                "--temperatures",
                ",".join(map(str, TEMPERATURES)),
                "--requests",
                str(REQUESTS),
                "--max-tokens",
                "64",
                "--warmup",
                "0",
                "--json",
            ]
        )
    assert code == 0
    delta = spec_counts(real_vllm.url) - before
    path.write_text(stdout.getvalue())
    document = json.loads(stdout.getvalue())
    for point in document["points"]:
        say(
            f"c={point['concurrency']} T={point['temperature']}: acceptance "
            f"{point['acceptance_rate']:.3f}, L {point['mean_acceptance_length']:.2f}, TPOT "
            f"spec {point['tpot_spec_ms']:.2f} ms, base {point['tpot_base_ms']:.2f} ms, "
            f"measured {point['measured_speedup']:.3f}, modelled {point['modelled_speedup']:.3f},"
            f" fitted c {point['draft_cost_ratio']:.3f}, running "
            f"{point['num_requests_running_spec']}/{point['num_requests_running_base']}"
        )
    say(
        f"calibrate: c = {document['draft_cost_ratio']:.3f}, break-even "
        f"{document['break_even_acceptance_rate']}, schedule {document['schedule']}"
    )
    yield document, delta, path


def test_the_json_has_every_point(calibrated: Any) -> None:
    document = calibrated[0]
    assert document["model_name"] == MODEL
    assert document["num_speculative_tokens"] == [NUM_SPEC_TOKENS]
    assert [(p["concurrency"], p["temperature"]) for p in document["points"]] == [
        (c, t) for c in CONCURRENCY for t in TEMPERATURES
    ]
    assert set(document["break_even_acceptance_rate"]) == {str(c) for c in CONCURRENCY}
    assert document["draft_cost_ratio_concurrency"] == max(CONCURRENCY)
    assert document["schedule"]["num_speculative_tokens"] == NUM_SPEC_TOKENS
    for point in document["points"]:
        assert point["requests_spec"] == point["requests_base"] == REQUESTS
        assert point["num_requests_running_spec"] is not None
        assert point["num_requests_running_base"] is not None


def test_figures_are_the_ratios_of_the_measurements(calibrated: Any) -> None:
    for point in calibrated[0]["points"]:
        assert point["measured_speedup"] == point["tpot_base_ms"] / point["tpot_spec_ms"]
        assert point["acceptance_rate"] == point["accepted_tokens"] / point["draft_tokens"]
        length = 1 + point["accepted_tokens"] / point["drafts"]
        assert point["mean_acceptance_length"] == length
        assert point["draft_cost_ratio"] == (
            (length / point["measured_speedup"] - 1) / NUM_SPEC_TOKENS
        )
        assert point["modelled_speedup"] == length / (1 + NUM_SPEC_TOKENS * 0.1)


def test_acceptance_is_the_counter_delta(calibrated: Any) -> None:
    document, delta, _ = calibrated
    points = document["points"]
    assert delta.drafts > 0
    assert sum(p["drafts"] for p in points) == delta.drafts
    assert sum(p["draft_tokens"] for p in points) == delta.draft_tokens
    assert sum(p["accepted_tokens"] for p in points) == delta.accepted_tokens


def test_check_with_the_calibration_follows_the_measured_c(
    calibrated: Any, real_vllm: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    document, _, path = calibrated
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(base_url=real_vllm.url, timeout=120, trust_env=False) as client:
            while not stop.is_set():
                client.post(
                    "/v1/chat/completions",
                    json={
                        "model": MODEL,
                        "max_tokens": 32,
                        "temperature": 0,
                        "messages": [{"role": "user", "content": "def main():"}],
                    },
                )

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    try:
        capsys.readouterr()
        code = main(
            [
                "check",
                "--vllm-url",
                real_vllm.url,
                "--window",
                "4",
                "--json",
                "--calibration",
                str(path),
            ]
        )
    finally:
        stop.set()
        worker.join(timeout=120)
    report = json.loads(capsys.readouterr().out)
    entry = report["entries"][-1]
    cost = max(0.0, document["draft_cost_ratio"])
    assert entry["estimated_speedup"] == pytest.approx(
        entry["mean_acceptance_length"] / (1 + NUM_SPEC_TOKENS * cost)
    )
    if entry["estimated_speedup"] < 1:  # the measured c says speculation loses here
        assert report["verdict"] == "disable" and code == 2
    elif entry["acceptance_rate"] >= 0.5:
        assert report["verdict"] != "disable" and code != 2

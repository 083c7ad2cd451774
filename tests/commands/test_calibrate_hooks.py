"""run and check with --calibration: c comes from calibrate's file, and the verdict follows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakevllm import fake_vllm
from sidecar_process import sidecar
from specdec_exporter.cli import main
from variants import MODEL, capture

# t1 -> t3 of the capture: 5018 drafts, 20072 draft tokens, 15760 accepted, k = 4
MEAN_LENGTH = 1 + 15760 / 5018


def calibration_file(tmp_path: Path, cost: float, models: dict[str, float] | None = None) -> Path:
    document: dict[str, Any] = {
        "kind": "specdec-exporter calibration",
        "model_name": MODEL,
        "draft_cost_ratio": cost,
        "points": [],
    }
    if models is not None:
        document["models"] = {
            name: {"draft_cost_ratio": value, "break_even_acceptance_rate": max(0.0, value)}
            for name, value in models.items()
        }
    path = tmp_path / f"calibration-{cost}.json"
    path.write_text(json.dumps(document))
    return path


def check(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    """`check --json` over the capture's t1 -> t3 window, in this process."""
    with fake_vllm() as vllm:
        vllm.serve_in_turn(capture("t1"), capture("t3"))
        capsys.readouterr()
        code = main(["check", "--vllm-url", vllm.url, "--window", "0.3", "--json", *extra])
    out, err = capsys.readouterr()
    assert out, err
    return code, json.loads(out)


def aggregate(report: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = report["entries"][-1]
    assert entry["engine"] == "all"
    return entry


def test_a_calibration_saying_speculation_loses_turns_healthy_into_disable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, report = check(capsys)
    assert code == 0 and report["verdict"] == "healthy"
    code, report = check(capsys, "--calibration", str(calibration_file(tmp_path, 1.2)))
    assert code == 2 and report["verdict"] == "disable"
    assert aggregate(report)["acceptance_rate"] == 15760 / 20072  # the counts did not change
    assert aggregate(report)["estimated_speedup"] == pytest.approx(MEAN_LENGTH / (1 + 4 * 1.2))


def test_a_calibration_saying_speculation_pays_keeps_healthy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, report = check(capsys, "--calibration", str(calibration_file(tmp_path, 0.05)))
    assert code == 0 and report["verdict"] == "healthy"
    assert aggregate(report)["estimated_speedup"] == pytest.approx(MEAN_LENGTH / 1.2)


def test_the_served_models_own_entry_wins_over_the_top_level_figure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = calibration_file(tmp_path, 0.05, {MODEL: 1.2, "another/model": 0.01})
    code, report = check(capsys, "--calibration", str(path))
    assert code == 2 and report["verdict"] == "disable"
    assert aggregate(report)["estimated_speedup"] == pytest.approx(MEAN_LENGTH / 5.8)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{}", "model_name"),
        ("[1]", "is not a calibration"),
        ('{"model_name": "m", "draft_cost_ratio": "x"}', "draft_cost_ratio"),
    ],
)
def test_a_bad_calibration_file_is_one_line_and_exit_64(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "calibration.json"
    if content is not None:
        path.write_text(content)
    assert main(["check", "--calibration", str(path)]) == 64
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1


def test_a_calibration_and_a_draft_cost_flag_together_are_a_config_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = calibration_file(tmp_path, 0.05)
    assert main(["check", "--calibration", str(path), "--draft-cost-ratio", "0.01"]) == 64
    assert (
        "--draft-cost-ratio (or SPECDEC_DRAFT_COST_RATIO) and --calibration (or "
        "SPECDEC_CALIBRATION) both set c"
    ) in capsys.readouterr().err


def test_run_models_with_the_calibrated_c(tmp_path: Path) -> None:
    path = calibration_file(tmp_path, 0.05, {MODEL: 0.7})
    with (
        fake_vllm(capture("t3")) as vllm,
        sidecar(vllm.url, "--calibration", str(path)) as (url, records),
    ):
        text = httpx.get(url + "/metrics", timeout=5).text
    starting = next(r for r in records if r.get("msg") == "starting")
    assert starting["draft_cost_ratio"] == 0.7
    assert 'specdec_draft_cost_ratio{source="calibration"} 0.7' in text  # a series, not HELP

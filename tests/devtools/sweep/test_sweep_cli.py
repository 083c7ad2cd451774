"""``specdec-exporter sweep`` end to end through ``cli.main``, against the fake on loopback."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sweep_fake_vllm import FakeSpecVllm, serve_in_thread

from specdec_exporter.cli import main
from specdec_exporter.commands.sweep import SweepProgressLine
from specdec_exporter.devtools.sweep.config import SweepConfig
from specdec_exporter.devtools.sweep.runner import SweepProgress

SECRET = "sk-never-print-me-4242"
FAST = ("--requests", "5", "--concurrency", "2", "--seed", "7", "--temperatures", "0,1.0")


@pytest.fixture
def fake() -> FakeSpecVllm:
    return FakeSpecVllm()


@pytest.fixture
def url(fake: FakeSpecVllm) -> Iterator[str]:
    with serve_in_thread(fake) as base:
        yield base


def test_table_by_default_and_the_key_stays_secret(
    url: str, fake: FakeSpecVllm, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", "--url", url, *FAST, "--api-key", SECRET]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress bar: stderr is not a terminal
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"model fake-llama at {url}: 2 temperatures x 5 requests")
    rows = [line.split() for line in lines if line.startswith(("0.0 ", "1.0 "))]
    assert [(row[0], row[1], row[4], row[-1]) for row in rows] == [
        ("0.0", "per-request", "0.80", "healthy"),
        ("1.0", "per-request", "0.30", "threshold"),
    ]
    assert SECRET not in captured.out
    assert {served.authorization for served in fake.served} == {f"Bearer {SECRET}"}


def test_json_output(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert main(["sweep", "--url", url, *FAST, "--json", "--stream"]) == 0
    out = capsys.readouterr().out
    document = json.loads(out)
    assert (document["source"], document["seed"], document["stream"]) == ("per-request", 7, True)
    greedy, hot = document["phases"]
    assert (greedy["acceptance_rate"], hot["acceptance_rate"]) == (0.8, 0.3)
    assert greedy["per_request_acceptance_rate"]["p50"] == 0.8
    assert greedy["ttft_ms"]["p50"] > 0
    assert SECRET not in out


def test_csv_output(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--url", url, *FAST, "--csv", "--source", "counters"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(row["temperature"], row["source"], row["acceptance_rate"]) for row in rows] == [
        ("0.0", "counters", "0.8"),
        ("1.0", "counters", "0.3"),
    ]
    assert {row["acceptance_rate_p50"] for row in rows} == {""}


def test_counters_from_vllm_when_the_url_is_a_tap(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeSpecVllm(per_request_metrics=False)
    with serve_in_thread(fake.api_app) as tap, serve_in_thread(fake.metrics_app) as vllm:
        assert (
            main(["sweep", "--url", tap, "--metrics-url", f"{vllm}/metrics", *FAST, "--json"]) == 0
        )
    document = json.loads(capsys.readouterr().out)
    assert (document["source"], document["metrics_url"]) == ("counters", vllm)
    assert [phase["acceptance_rate"] for phase in document["phases"]] == [0.8, 0.3]
    assert [phase["counters_settled"] for phase in document["phases"]] == [True, True]


def test_prompts_file_is_used(
    url: str, fake: FakeSpecVllm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt\n\nsecond prompt\n", encoding="utf-8")
    assert main(["sweep", "--url", url, *FAST, "--prompts", str(prompts), "--quiet"]) == 0
    assert {served.prompt for served in fake.served} <= {"first prompt", "second prompt"}
    assert "first prompt" not in capsys.readouterr().out


def test_a_phase_without_success_exits_1_after_printing(
    url: str, fake: FakeSpecVllm, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fail_at.add(1.0)
    assert main(["sweep", "--url", url, *FAST]) == 1
    out = capsys.readouterr().out
    assert "T=1.0: no successful request, no figures." in out
    assert "T=1.0: errors by kind: http_500 5" in out


def test_unreadable_metrics_for_counters_exits_3_with_one_line(
    url: str, fake: FakeSpecVllm, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.metrics_status = 503
    assert main(["sweep", "--url", url, *FAST, "--source", "counters"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"specdec-exporter sweep: vLLM at {url} did not answer: cannot read {url}/metrics "
        "(http_status: HTTP 503). Is it running there? --url takes its base URL, "
        "http://HOST:PORT, with or without /v1\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--json", "--csv"], "--csv is not allowed with --json"),
        (["--temperatures", "0,0"], "--temperatures: temperature 0.0 given twice in '0,0'"),
        (
            ["--temperatures", "-1"],
            "--temperatures: temperature must be 0 to 2, got '-1'",
        ),
        (["--requests", "0"], "--requests: Input should be greater than or equal to 1 (got '0')"),
        (
            ["--source", "guess"],
            "--source: Input should be 'auto', 'per-request' or 'counters' (got 'guess')",
        ),
        (["--url", "vllm:8000"], "--url: expected an http:// or https:// URL, got 'vllm:8000'"),
        (
            ["--metrics-url", "vllm:8000"],
            "--metrics-url: expected an http:// or https:// URL, got 'vllm:8000'",
        ),
    ],
)
def test_bad_flags_exit_64_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", *argv]) == 64
    assert capsys.readouterr().err == f"specdec-exporter sweep: invalid setting: {message}\n"


def test_an_empty_prompts_file_exits_64_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    assert main(["sweep", "--prompts", str(empty)]) == 64
    assert capsys.readouterr().err == (
        f"specdec-exporter sweep: --prompts: prompts file {empty} has no prompt\n"
    )


def test_progress_line_counts_the_whole_sweep() -> None:
    stream, now = io.StringIO(), [0.0]
    line = SweepProgressLine(
        stream, SweepConfig(temperatures=(0.0, 1.0), requests=10), clock=lambda: now[0]
    )
    line.record(SweepProgress(1, "1.0", 15, 2))
    assert line.text() == "[######################........] 15/20  T=1.0 (2/2)  errors 2"
    line.record(SweepProgress(1, "1.0", 16, 2))  # too soon: not redrawn
    line.record(SweepProgress(1, "1.0", 20, 2, settling=True))  # a state change always is
    assert line.text().endswith("20/20  T=1.0 (2/2)  waiting for counters")
    line.close()
    frames = stream.getvalue().split("\r")[1:]
    assert len(frames) == 3
    assert frames[-1] == "\x1b[K"

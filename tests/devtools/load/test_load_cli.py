"""``specdec-exporter load`` end to end through ``cli.main``, against the fake vLLM."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from load_fake_vllm import FakeVllm, closed_port

from specdec_exporter.cli import main
from specdec_exporter.commands.load import (
    LoadSettings,
    ProgressLine,
    build_config,
    run_with_progress,
)
from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.runner import Progress

SECRET = "sk-never-print-me-4242"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["load", *argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress bar when stderr is not a terminal
    document: dict[str, object] = json.loads(captured.out)
    return document


def test_json_summary_structure_and_exact_acceptance(
    url: str, fake: FakeVllm, capsys: pytest.CaptureFixture[str]
) -> None:
    document = run_json(
        capsys,
        "--url",
        url,
        "--requests",
        "6",
        "--concurrency",
        "3",
        "--temperatures",
        "0:0.5,default:0.5",
        "--stream-share",
        "0.5",
        "--seed",
        "1",
    )
    assert set(document) == {
        "model",
        "endpoint",
        "elapsed_s",
        "requests",
        "succeeded",
        "buckets",
        "total",
    }
    assert (document["model"], document["endpoint"]) == ("tiny-llama", "chat")
    assert (document["requests"], document["succeeded"]) == (6, 6)
    buckets = document["buckets"]
    assert isinstance(buckets, list)
    zero, default = buckets
    total = document["total"]
    assert isinstance(total, dict)
    assert set(zero) == {
        "temperature",
        "requests",
        "errors",
        "errors_by_kind",
        "output_tokens",
        "tokens_per_s",
        "ttft_ms",
        "tpot_ms",
        "spec",
    }
    assert (zero["temperature"], default["temperature"], total["temperature"]) == (
        "0.0",
        "default",
        "total",
    )
    assert (zero["requests"], zero["errors"], zero["output_tokens"]) == (3, 0, 288)
    # 2 of 3 streamed per bucket; T=0 streams and answers are the same greedy run: 73/92 each.
    assert zero["spec"] == {
        "requests": 3,
        "num_spec_steps": 69,
        "num_draft_tokens": 276,
        "num_accepted_draft_tokens": 219,
        "acceptance_rate": 219 / 276,
        "mean_acceptance_length": 1 + 219 / 69,
    }
    # default: two T=0.8 streams (52/172) and one no-temperature answer (63/140).
    assert default["spec"]["acceptance_rate"] == 167 / 484
    assert total["spec"]["acceptance_rate"] == 386 / 760
    assert set(zero["ttft_ms"]) == set(zero["tpot_ms"]) == {"p50", "p99"}
    assert zero["ttft_ms"]["p50"] > 0
    assert sum("temperature" not in r.body for r in fake.received) == 3


def test_table_has_a_row_per_temperature_and_errors_by_kind(
    url: str, fake: FakeVllm, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fail_at[1.0] = "http-500"
    code = main(
        ["load", "--url", url, "--requests", "4", "--temperatures", "0.7,1.0", "--seed", "2"]
    )
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("model tiny-llama, endpoint chat: 4 requests (2 ok)")
    header = lines[2].split()
    assert header[:6] == ["temperature", "requests", "errors", "out", "tokens", "tokens/s"]
    assert "accept" in header
    assert [line.split()[0] for line in lines[4:7]] == ["0.7", "1.0", "total"]
    assert lines[4].split()[1:4] == ["2", "0", "192"]
    assert lines[5].split()[1:4] == ["2", "2", "0"]
    assert lines[-1] == "errors by kind: http_500 2"


def test_all_failed_exits_1(url: str, fake: FakeVllm, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "--url", url, "--model", "http-500", "--requests", "3"]) == 1
    assert "errors by kind: http_500 3" in capsys.readouterr().out


def test_unreachable_server_exits_3_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    assert main(["load", "--url", url + "/v1", "--quiet"]) == 3
    err = capsys.readouterr().err
    assert err == (
        f"specdec-exporter load: the server at {url} did not answer: GET /v1/models: cannot "
        "connect. Is it running there? --url takes its base URL, http://HOST:PORT, with or "
        "without /v1\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--temperatures", "0:0.5,abc:1"], "--temperatures: temperature is not a number: 'abc'"),
        (["--requests", "5", "--duration", "3"], "--duration is not allowed with --requests"),
        (
            ["--stream-share", "1.5"],
            "--stream-share: Input should be less than or equal to 1 (got '1.5')",
        ),
        (
            ["--concurrency", "0"],
            "--concurrency: Input should be greater than or equal to 1 (got '0')",
        ),
        (["--duration", "0"], "--duration: Input should be greater than or equal to 0.1 (got '0')"),
        (
            ["--endpoint", "embeddings"],
            "--endpoint: Input should be 'chat' or 'completions' (got 'embeddings')",
        ),
        (
            ["--url", "127.0.0.1:8000"],
            "--url: expected an http:// or https:// URL, got '127.0.0.1:8000'",
        ),
    ],
)
def test_bad_arguments_exit_64_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["load", *argv]) == 64
    assert capsys.readouterr().err == f"specdec-exporter load: invalid setting: {message}\n"


def test_requests_bound_the_run_unless_a_duration_does() -> None:
    by_count, by_time = build_config(LoadSettings()), build_config(LoadSettings(duration=3))
    assert (by_count.request_limit, by_count.duration) == (100, None)
    assert (by_time.request_limit, by_time.duration) == (None, 3)


def test_bad_prompts_file_exits_64(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "--prompts", str(tmp_path / "missing.txt")]) == 64
    assert "cannot read prompts file" in capsys.readouterr().err
    (tmp_path / "blank.txt").write_text("\n  \n")
    assert main(["load", "--prompts", str(tmp_path / "blank.txt")]) == 64
    assert "has no prompt" in capsys.readouterr().err


def test_prompts_file_is_used(
    url: str, fake: FakeVllm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt\n\nsecond prompt\n")
    run_json(capsys, "--url", url, "--requests", "6", "--prompts", str(prompts), "--seed", "3")
    assert {r.body["messages"][0]["content"] for r in fake.received} <= {
        "first prompt",
        "second prompt",
    }


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_api_key_never_appears_in_any_output(
    url: str,
    fake: FakeVllm,
    output: list[str],
    *,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.fail_at[1.0] = "http-401"  # the fake echoes the Authorization header in its error body
    argv = ["load", "--url", url, "--requests", "4", "--temperatures", "0,1.0", *output]
    assert main([*argv, "--api-key", SECRET]) == 0
    monkeypatch.setenv("OPENAI_API_KEY", SECRET + "-env")
    assert main([*argv, "--stream-share", "1"]) == 0
    captured = capsys.readouterr()
    assert "http_401" in captured.out
    for text in (captured.out, captured.err, caplog.text):
        assert SECRET not in text
    assert {r.headers["authorization"] for r in fake.received} == {
        f"Bearer {SECRET}",
        f"Bearer {SECRET}-env",
    }


def test_the_key_stays_out_of_config_errors_and_repr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "--api-key", SECRET, "--concurrency", "0", "--timeout", "x"]) == 64
    assert SECRET not in capsys.readouterr().err
    settings = LoadSettings(api_key=SECRET)
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert build_config(settings).api_key == SECRET


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_line_redraws_at_most_five_times_a_second() -> None:
    stream, clock = io.StringIO(), FakeClock()
    line = ProgressLine(stream, LoadConfig(requests=10, mix=parse_mix("0")), clock)
    for done in range(1, 6):
        line.record(Progress(done, 0, 0.0))
    assert stream.getvalue().count("\r") == 1
    clock.now += 0.5
    line.record(Progress(6, 1, 0.5))
    bar = "[" + "#" * 18 + "." * 12 + "]"
    assert stream.getvalue().endswith(f"\r{bar}  6/10  errors 1  12.0 req/s\x1b[K")
    line.close()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_progress_line_in_duration_mode_counts_seconds() -> None:
    stream, clock = io.StringIO(), FakeClock()
    line = ProgressLine(stream, LoadConfig(duration=20, mix=parse_mix("0")), clock)
    clock.now += 5
    line.record(Progress(40, 2, 5.0))
    assert "]  5/20  seconds  requests 40  errors 2  8.0 req/s" in stream.getvalue()


@pytest.mark.anyio
async def test_run_with_progress_draws_then_erases_the_line(url: str, fake: FakeVllm) -> None:
    stream = io.StringIO()
    settings = LoadConfig(url=url, requests=5, concurrency=2, mix=parse_mix("0"))
    result = await run_with_progress(settings, ProgressLine(stream, settings))
    assert result.succeeded == 5
    text = stream.getvalue()
    assert text.startswith("\r[") and "/5  errors 0" in text
    assert text.endswith("\r\x1b[K")

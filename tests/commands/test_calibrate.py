"""The calibrate command: its JSON and table, figures that equal what the servers counted,
refusals with one line each, and --write-config."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tomllib
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest
from calibrate_support import SERVER_TIMED, calibrate, spec_config

from specdec_exporter.cli import main
from specdec_exporter.commands.calibrate import (
    CONFIG_BEGIN,
    CalibrateSettings,
    WriteConfigError,
    assumed_cost_ratio,
    build_config,
    configure,
    write_alerts_config,
)
from specdec_exporter.commands.flags import settings_from_args
from specdec_exporter.core.calibration import Calibration
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
FAST = {"speed": 4.0}
SMALL = (
    "--concurrency",
    "1,4",
    "--temperatures",
    "0,1.0",
    "--requests",
    "6",
    "--max-tokens",
    "24",
    "--warmup",
    "0",
    "--sample-interval",
    "0.01",
)
POINT_KEYS = {
    "concurrency",
    "temperature",
    "num_speculative_tokens",
    "acceptance_rate",
    "mean_acceptance_length",
    "tpot_spec_ms",
    "tpot_base_ms",
    "measured_speedup",
    "modelled_speedup",
    "draft_cost_ratio",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "requests_spec",
    "requests_base",
    "num_requests_running_spec",
    "num_requests_running_base",
}


@pytest.fixture(scope="module")
def measured() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str]:
    """One small calibration of an ngram spec simulator against a plain one, both ground truths
    right after it, and the table of a second, identical run."""
    with (
        running_simulator(spec_config(4, method="ngram", **FAST)) as spec,
        running_simulator(SimConfig(**FAST)) as base,
    ):
        args = ("--spec-url", spec.url, "--base-url", base.url, *SMALL)
        document = json.loads(run_cli(*args, "--json"))
        spec_truth, base_truth = spec.ground_truth(), base.ground_truth()
        table = run_cli(*args)
    return document, spec_truth, base_truth, table


def run_cli(*args: str) -> str:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["calibrate", *args])
    assert code == 0, stderr.getvalue()
    return stdout.getvalue()


def test_json_has_one_point_per_concurrency_and_temperature(measured: Any) -> None:
    document = measured[0]
    assert [(p["concurrency"], p["temperature"]) for p in document["points"]] == [
        (1, 0.0),
        (1, 1.0),
        (4, 0.0),
        (4, 1.0),
    ]
    assert all(set(point) == POINT_KEYS for point in document["points"])
    assert document["kind"] == "specdec-exporter calibration"
    assert document["model_name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert document["tpot_source"] == "client"
    assert document["assumed_draft_cost_ratio"] == 0.1
    assert document["num_speculative_tokens"] == [4]
    assert set(document["break_even_acceptance_rate"]) == {"1", "4"}
    assert [fit["concurrency"] for fit in document["concurrency_fits"]] == [1, 4]


def test_measured_figures_are_the_ratios_of_what_was_measured(measured: Any) -> None:
    document = measured[0]
    for point in document["points"]:
        assert point["measured_speedup"] == point["tpot_base_ms"] / point["tpot_spec_ms"]
        assert point["acceptance_rate"] == point["accepted_tokens"] / point["draft_tokens"]
        assert point["mean_acceptance_length"] == 1 + point["accepted_tokens"] / point["drafts"]
        length, k = point["mean_acceptance_length"], point["num_speculative_tokens"]
        assert point["draft_cost_ratio"] == (length / point["measured_speedup"] - 1) / k
        assert point["modelled_speedup"] == length / (1 + k * 0.1)
        assert point["requests_spec"] == point["requests_base"] == 6
        assert 0 <= point["num_requests_running_spec"] <= point["concurrency"]
        assert 0 <= point["num_requests_running_base"] <= point["concurrency"]
    fits = {fit["concurrency"]: fit for fit in document["concurrency_fits"]}
    for concurrency in (1, 4):
        own = [p["draft_cost_ratio"] for p in document["points"] if p["concurrency"] == concurrency]
        assert fits[concurrency]["draft_cost_ratio"] == fmean(own)
        assert document["break_even_acceptance_rate"][str(concurrency)] == max(0.0, fmean(own))
    assert document["draft_cost_ratio"] == fits[4]["draft_cost_ratio"]
    assert document["draft_cost_ratio_concurrency"] == 4
    assert document["models"] == {
        document["model_name"]: {
            "draft_cost_ratio": document["draft_cost_ratio"],
            "break_even_acceptance_rate": max(0.0, document["draft_cost_ratio"]),
        }
    }


def test_acceptance_is_what_the_spec_server_counted(measured: Any) -> None:
    document, spec_truth, base_truth, _ = measured
    points = document["points"]
    for key in ("drafts", "draft_tokens", "accepted_tokens"):
        assert sum(point[key] for point in points) == spec_truth["total"][key]
    by_temperature = spec_truth["by_temperature"]
    for label in ("0.0", "1.0"):
        own = [p for p in points if repr(p["temperature"]) == label]
        assert sum(p["draft_tokens"] for p in own) == by_temperature[label]["draft_tokens"]
        assert sum(p["accepted_tokens"] for p in own) == by_temperature[label]["accepted_tokens"]
    # the same seeded load went to both servers: the same requests per temperature
    assert (
        {key: value["requests"] for key, value in by_temperature.items()}
        == {key: value["requests"] for key, value in base_truth["by_temperature"].items()}
        == {"0.0": 12, "1.0": 12}
    )


def test_the_table_shows_every_point_and_fit(measured: Any) -> None:
    table = measured[3]
    lines = table.splitlines()
    points_at = next(i for i, line in enumerate(lines) if line.startswith("k  concurrency"))
    assert "TPOT spec ms" in lines[points_at] and "measured speedup" in lines[points_at]
    assert "fitted c" in lines[points_at] and "running spec" in lines[points_at]
    rows = [line.split() for line in lines[points_at + 2 : points_at + 6]]
    assert [(row[0], row[1], row[2]) for row in rows] == [
        ("4", "1", "0.0"),
        ("4", "1", "1.0"),
        ("4", "4", "0.0"),
        ("4", "4", "1.0"),
    ]
    fits_at = next(i for i, line in enumerate(lines) if line.startswith("concurrency  "))
    assert "break-even acceptance" in lines[fits_at]
    assert [line.split()[0] for line in lines[fits_at + 2 : fits_at + 4]] == ["1", "4"]
    assert "the sidecar assumed 0.1" in table
    snippet = json.loads(table.split("0: plain decoding):\n")[1].splitlines()[0])
    assert snippet["num_speculative_tokens"] == 4
    assert snippet["num_speculative_tokens_per_batch_size"][0][0] == 1


NGRAM = spec_config(4, method="ngram", **FAST)
PLAIN = SimConfig(**FAST)


@pytest.mark.parametrize(
    ("spec", "base", "extra", "message"),
    [
        (NGRAM, NGRAM, (), "--base-url"),
        (PLAIN, PLAIN, (), "shows no speculative decoding"),
        (NGRAM, SimConfig(served_model_name="other", **FAST), (), "must serve the same model"),
        (NGRAM, PLAIN, ("--tpot-source", "server"), "--enable-per-request-metrics"),
    ],
)
def test_refusals_are_one_line_and_exit_3(
    capsys: pytest.CaptureFixture[str],
    spec: SimConfig,
    base: SimConfig,
    extra: tuple[str, ...],
    message: str,
) -> None:
    with running_simulator(spec) as spec_sim, running_simulator(base) as base_sim:
        code, out, err = calibrate(
            capsys,
            "--spec-url",
            spec_sim.url,
            "--base-url",
            base_sim.url,
            "--concurrency",
            "1",
            "--temperatures",
            "0",
            "--requests",
            "1",
            "--max-tokens",
            "4",
            "--warmup",
            "0",
            *extra,
        )
    assert code == 3 and out == ""
    assert message in err and err.count("\n") == 1 + err.count("calibrate: [")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--concurrency", "1,x"),
            "--concurrency: Input should be a valid integer, unable to parse string as an "
            "integer (got 'x')",
        ),
        (
            ("--concurrency", "0"),
            "--concurrency: Input should be greater than or equal to 1 (got 0)",
        ),
        (("--temperatures", "0,0"), "--temperatures: temperature 0.0 given twice in '0,0'"),
        (
            ("--temperatures", "0:1,1:1"),
            "--temperatures: a list of temperatures, without weights: '0:1,1:1'",
        ),
        (
            ("--draft-cost-ratio", "-1"),
            "--draft-cost-ratio (or SPECDEC_DRAFT_COST_RATIO): Input should be greater than or "
            "equal to 0 (got -1.0)",
        ),
        (
            ("--base-url", "localhost:8000"),
            "--base-url: expected an http:// or https:// URL, got 'localhost:8000'",
        ),
        (
            ("--spec-url", "localhost:8000"),
            "--spec-url: expected an http:// or https:// URL, got 'localhost:8000'",
        ),
        (
            ("--max-tokens", "1"),
            "--max-tokens: Input should be greater than or equal to 2 (got '1')",
        ),
        (("--warmup", "-1"), "--warmup: Input should be greater than or equal to 0 (got '-1')"),
        (
            ("--sample-interval", "0"),
            "--sample-interval: Input should be greater than or equal to 0.01 (got '0')",
        ),
        (
            ("--settle-timeout", "-1"),
            "--settle-timeout: Input should be greater than or equal to 0 (got '-1')",
        ),
        (
            ("--tpot-source", "wall"),
            "--tpot-source: Input should be 'client' or 'server' (got 'wall')",
        ),
    ],
)
def test_bad_flags_exit_64_with_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, out, err = calibrate(
        capsys, "--spec-url", "http://127.0.0.1:9", "--base-url", "http://127.0.0.1:9", *args
    )
    assert (code, out) == (64, "")
    assert err == f"specdec-exporter calibrate: invalid setting: {message}\n"


@pytest.mark.parametrize("args", [(), ("--spec-url", "http://127.0.0.1:9")])
def test_both_servers_are_needed(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    code, _, err = calibrate(capsys, *args)
    assert code == 64
    assert err == (
        "specdec-exporter calibrate: invalid setting: give --spec-url (a vLLM with speculation, "
        "once per k) and --base-url (the same model without)\n"
    )


SERVERS = ("--spec-url", "http://127.0.0.1:9", "--base-url", "http://127.0.0.1:10")


def settings(*argv: str) -> CalibrateSettings:
    parser = argparse.ArgumentParser()
    configure(parser)
    return settings_from_args(CalibrateSettings, parser.parse_args(argv))


def test_the_config_takes_the_flags_given_and_the_defaults_of_the_rest() -> None:
    given = build_config(
        settings(
            "--spec-url",
            "http://spec-a:8000/",
            "--spec-url",
            "http://spec-b:8000",
            "--base-url",
            "http://plain:8000",
            "--concurrency",
            "8,1,8",
            "--temperatures",
            "1.0,default",
            "--max-tokens",
            "16",
            "--settle-timeout",
            "2.5",
        )
    )
    assert (given.spec_urls, given.base_url) == (
        ("http://spec-a:8000", "http://spec-b:8000"),
        "http://plain:8000",
    )
    assert (given.concurrencies, given.temperatures) == ((1, 8), (1.0, None))
    assert (given.max_tokens, given.settle_timeout) == (16, 2.5)
    default = build_config(settings(*SERVERS))
    assert (default.concurrencies, default.temperatures, default.requests) == (
        (1, 8, 32),
        (0.0, 0.7, 1.0),
        None,
    )
    assert (default.max_tokens, default.seed, default.warmup, default.tpot_source) == (
        128,
        0,
        4,
        "client",
    )
    assert (default.sample_interval, default.settle_timeout) == (0.25, 10.0)


def test_the_assumed_c_is_the_one_run_and_check_would_use(monkeypatch: pytest.MonkeyPatch) -> None:
    assert assumed_cost_ratio(settings(*SERVERS)) == 0.1
    assert assumed_cost_ratio(settings(*SERVERS, "--speculative-method", "ngram")) == 0.01
    monkeypatch.setenv("SPECDEC_SPECULATIVE_METHOD", "eagle3")
    assert assumed_cost_ratio(settings(*SERVERS)) == 0.05
    monkeypatch.setenv("SPECDEC_DRAFT_COST_RATIO", "0.3")
    assert assumed_cost_ratio(settings(*SERVERS)) == 0.3
    assert assumed_cost_ratio(settings(*SERVERS, "--draft-cost-ratio", "0.2")) == 0.2


def test_unreachable_server_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = calibrate(
        capsys,
        "--spec-url",
        "http://127.0.0.1:9",
        "--base-url",
        "http://127.0.0.1:9",
        "--warmup",
        "0",
    )
    assert code == 3 and "http://127.0.0.1:9" in err


def calibration(cost: float, model: str = "tiny-llama") -> Calibration:
    return Calibration.model_validate(
        {
            "model_name": model,
            "draft_cost_ratio": cost,
            "draft_cost_ratio_concurrency": 8,
            "num_speculative_tokens": [4],
            "models": {model: {"draft_cost_ratio": cost, "break_even_acceptance_rate": cost}},
        }
    )


@pytest.fixture
def alerts_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    shutil.copy(REPO_ROOT / "alerts" / "config.toml", path)
    return path


def test_write_config_adds_its_own_table_and_replaces_it_later(alerts_config: Path) -> None:
    original = alerts_config.read_text()
    block = write_alerts_config(alerts_config, calibration(0.35123456))
    text = alerts_config.read_text()
    assert text.startswith(original.rstrip("\n")) and text.endswith(block)
    assert tomllib.loads(text)["calibration"] == {
        "models": {"tiny-llama": {"break_even_acceptance_rate": 0.3512, "draft_cost_ratio": 0.3512}}
    }
    write_alerts_config(alerts_config, calibration(0.5))
    again = alerts_config.read_text()
    assert again.count(CONFIG_BEGIN) == 1 and again.startswith(original.rstrip("\n"))
    assert (
        tomllib.loads(again)["calibration"]["models"]["tiny-llama"]["break_even_acceptance_rate"]
        == 0.5
    )
    # the generator's loader still reads the file
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        from specdec_artifacts.settings import load  # noqa: PLC0415
    finally:
        sys.path.remove(str(REPO_ROOT / "tools"))
    assert load(alerts_config).thresholds.acceptance_rate == 0.5


def test_write_config_quotes_model_names(alerts_config: Path) -> None:
    write_alerts_config(alerts_config, calibration(0.2, 'org/model "v2".x'))
    models = tomllib.loads(alerts_config.read_text())["calibration"]["models"]
    assert models == {
        'org/model "v2".x': {"break_even_acceptance_rate": 0.2, "draft_cost_ratio": 0.2}
    }


def test_write_config_refuses_a_break_even_above_1(alerts_config: Path) -> None:
    original = alerts_config.read_text()
    with pytest.raises(WriteConfigError, match="never pays"):
        write_alerts_config(alerts_config, calibration(1.4))
    assert alerts_config.read_text() == original


def test_write_config_refuses_a_hand_written_table(alerts_config: Path) -> None:
    alerts_config.write_text(alerts_config.read_text() + "\n[calibration]\nx = 1\n")
    before = alerts_config.read_text()
    with pytest.raises(WriteConfigError, match="not written by calibrate"):
        write_alerts_config(alerts_config, calibration(0.2))
    assert alerts_config.read_text() == before


def test_write_config_from_the_command_says_what_it_wrote(
    capsys: pytest.CaptureFixture[str], alerts_config: Path
) -> None:
    # server-side TPOTs in modelled time: a cheap ngram drafter stays well below 1
    with (
        running_simulator(spec_config(4, method="ngram", **SERVER_TIMED)) as spec,
        running_simulator(SimConfig(**SERVER_TIMED)) as base,
    ):
        code, out, err = calibrate(
            capsys,
            "--spec-url",
            spec.url,
            "--base-url",
            base.url,
            "--concurrency",
            "2",
            "--temperatures",
            "0",
            "--requests",
            "4",
            "--max-tokens",
            "16",
            "--warmup",
            "0",
            "--json",
            "--tpot-source",
            "server",
            "--write-config",
            str(alerts_config),
        )
    assert code == 0 and f"wrote into {alerts_config}" in err and CONFIG_BEGIN in err
    cost = json.loads(out)["draft_cost_ratio"]
    assert 0 < cost < 0.5
    written = tomllib.loads(alerts_config.read_text())["calibration"]["models"]
    assert written["meta-llama/Llama-3.1-8B-Instruct"] == {
        "draft_cost_ratio": round(cost, 4),
        "break_even_acceptance_rate": round(cost, 4),
    }


def test_a_phase_shorter_than_the_sample_interval_still_has_a_running_sample() -> None:
    """CI's real vLLM finished a plain phase in under the 0.25 s interval and reported no
    running figure: the first sample comes after 50 ms whatever the interval."""
    with (
        running_simulator(spec_config(4, method="ngram")) as spec,
        running_simulator(SimConfig()) as base,
    ):
        document = json.loads(
            run_cli(
                *("--spec-url", spec.url, "--base-url", base.url),
                *("--concurrency", "1", "--temperatures", "0", "--requests", "4"),
                *("--max-tokens", "96", "--warmup", "0", "--sample-interval", "60", "--json"),
            )
        )
    (point,) = document["points"]
    assert point["num_requests_running_spec"] is not None
    assert point["num_requests_running_base"] is not None

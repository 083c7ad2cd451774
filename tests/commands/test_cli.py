"""The command line end to end: `check` and `run` against a fake vLLM on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from fakevllm import FakeVllm, fake_vllm
from sidecar_process import sidecar, wait_for
from specdec_exporter.cli import COMMANDS, main
from specdec_exporter.commands.exits import EXIT_USAGE
from variants import FIXTURES, MODEL, capture

SPECDEC = [sys.executable, "-m", "specdec_exporter.cli"]


def test_bad_setting_is_one_line_and_exit_64(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--interval", "-1"]) == EXIT_USAGE == 64
    assert capsys.readouterr().err == (
        "specdec-exporter run: invalid setting: --interval (or SPECDEC_INTERVAL): Input should be "
        "greater than or equal to 0.1 (got '-1')\n"
    )


def test_bad_environment_value_is_one_line_and_exit_64(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEC_LISTEN", "nonsense")
    assert main(["run"]) == 64
    assert capsys.readouterr().err == (
        "specdec-exporter run: invalid setting: --listen (or SPECDEC_LISTEN): expected HOST:PORT, "
        "got 'nonsense'\n"
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_exits_64_on_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--no-such-flag"])
    assert exited.value.code == 64
    assert capsys.readouterr().err.endswith(
        f"specdec-exporter {command}: error: unrecognized arguments: --no-such-flag\n"
    )


def test_an_unknown_command_exits_64() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve"])
    assert exited.value.code == 64


def test_run_never_imports_the_dev_tools() -> None:
    """`python -X importtime` lists every module `run` imports, the tap's included."""
    with fake_vllm(capture("t3")) as vllm:
        process = subprocess.Popen(
            [
                sys.executable,
                "-X",
                "importtime",
                *SPECDEC[1:],
                "run",
                "--vllm-url",
                vllm.url,
                "--listen",
                "127.0.0.1:0",
                "--proxy-listen",
                "127.0.0.1:0",
            ],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert process.stderr is not None
        lines = []
        with process.stderr:
            for line in process.stderr:
                lines.append(line)
                if '"component": "tap"' in line:
                    process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    imported = {
        line.rpartition("|")[2].strip() for line in lines if line.startswith("import time:")
    }
    assert {"specdec_exporter.sidecar.serve", "specdec_exporter.tap.proxy"} <= imported
    assert sorted(name for name in imported if "devtools" in name) == []


def test_a_threshold_above_the_healthy_band_is_one_line_and_exit_64(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", "--threshold", "0.8"]) == 64
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert error == (
        "specdec-exporter check: invalid setting: --threshold (or SPECDEC_THRESHOLD) is 0.8, "
        "above --healthy-above (or SPECDEC_HEALTHY_ABOVE) 0.65: the borderline band runs from "
        "the threshold up to healthy-above; lower the one or raise the other"
    )


def run_check(vllm: FakeVllm, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPECDEC, "check", "--vllm-url", vllm.url, "--window", "0.3", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@contextmanager
def vllm_serving(*bodies: str) -> Iterator[FakeVllm]:
    with fake_vllm() as vllm:
        vllm.serve_in_turn(*bodies)
        yield vllm


def test_check_json_healthy_window() -> None:
    with vllm_serving(capture("t1"), capture("t3")) as vllm:
        result = run_check(vllm, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "healthy"
    aggregate = report["entries"][-1]
    assert aggregate["engine"] == "all" and aggregate["model_name"] == MODEL
    # t1 -> t3 = intervals t2 + t3 of the ground truth
    assert (aggregate["drafts"], aggregate["draft_tokens"], aggregate["accepted_tokens"]) == (
        2434 + 2584,
        9736 + 10336,
        7671 + 8089,
    )
    assert aggregate["acceptance_rate"] == (7671 + 8089) / (9736 + 10336)
    assert len(aggregate["per_position_acceptance_rate"]) == 4
    expected_keys = {
        "model_name",
        "engine",
        "acceptance_rate",
        "mean_acceptance_length",
        "per_position_acceptance_rate",
        "drafts",
        "draft_tokens",
        "accepted_tokens",
        "estimated_speedup",
        "verdict",
    }
    assert expected_keys <= set(aggregate)


@pytest.mark.parametrize(
    ("bodies", "extra", "code", "verdict"),
    [
        # t4 -> t6: acceptance 0.344, L 2.376, k 4: below t = 0.5, but 2.376 / 1.4 = 1.70 pays.
        (("t4", "t6"), (), 1, "below threshold"),
        # The same window with c = 0.35: 2.376 / 2.4 = 0.99, a net loss.
        (("t4", "t6"), ("--draft-cost-ratio", "0.35"), 2, "disable"),
        # A threshold of 0.3 for this method makes it borderline.
        (("t4", "t6"), ("--threshold", "0.3"), 1, "borderline"),
        (("t7", "t8"), (), 1, "not drafting"),
    ],
)
def test_check_exit_codes(
    bodies: tuple[str, str], extra: tuple[str, ...], code: int, verdict: str
) -> None:
    with vllm_serving(*(capture(tag) for tag in bodies)) as vllm:
        result = run_check(vllm, *extra)
    assert result.returncode == code, result.stderr
    assert f"verdict: {verdict}" in result.stdout


def test_check_text_with_one_engine_has_no_repeated_all_row() -> None:
    with vllm_serving(capture("t1"), capture("t3")) as vllm:
        result = run_check(vllm)
    assert result.returncode == 0, result.stderr
    rows = [line.split()[1] for line in result.stdout.splitlines() if line.startswith(MODEL)]
    assert rows == ["0"]


def test_check_takes_the_url_with_v1() -> None:
    with vllm_serving(capture("t1"), capture("t3")) as vllm:
        result = subprocess.run(
            [*SPECDEC, "check", "--vllm-url", vllm.url + "/v1/", "--window", "0.3", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["vllm_url"] == vllm.url


def test_check_window_is_its_own_and_a_bad_one_is_a_usage_error() -> None:
    """check reads SPECDEC_VLLM_URL (shared with run), never the sidecar's SPECDEC_WINDOW."""
    with vllm_serving(capture("t1"), capture("t3")) as vllm:
        env = {**os.environ, "SPECDEC_VLLM_URL": vllm.url, "SPECDEC_WINDOW": "nonsense"}
        result = subprocess.run(
            [*SPECDEC, "check", "--window", "0.3", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["vllm_url"] == vllm.url
        bad = run_check(vllm, "--window", "0")
    assert (bad.returncode, bad.stdout) == (64, "")
    assert bad.stderr == (
        "specdec-exporter check: invalid setting: --window: Input should be "
        "greater than or equal to 0.1 (got '0')\n"
    )


def test_check_json_names_t_s_c_and_where_c_came_from() -> None:
    with vllm_serving(capture("t4"), capture("t6")) as vllm:
        result = run_check(vllm, "--json", "--speculative-method", "eagle3")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["verdict"], report["threshold"], report["healthy_above"]) == (
        "below threshold",
        0.5,
        0.65,
    )
    assert (report["draft_cost_ratio"], report["draft_cost_ratio_source"]) == (0.05, "method")
    aggregate = report["entries"][-1]
    assert aggregate["estimated_speedup"] == (1 + (7158 + 6046) / (5042 + 4552)) / 1.2
    assert aggregate["break_even_acceptance_rate"] == 0.05
    assert "modelled speedup 1.98, c = 0.05 (default of method eagle3)" in report["explanation"]


def test_check_spec_off_and_unreachable() -> None:
    nospec = (FIXTURES / "vllm-0.33.0/nospec.t1.prom").read_text()
    with vllm_serving(nospec) as vllm:
        assert run_check(vllm).returncode == 2
        url = vllm.url
    result = subprocess.run(
        [*SPECDEC, "check", "--vllm-url", url, "--window", "0.1", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3
    assert json.loads(result.stdout)["verdict"] == "unreachable"


def test_run_serves_survives_an_outage_and_recovers() -> None:
    with fake_vllm(capture("t3")) as vllm, sidecar(vllm.url) as (url, records):
        text = wait_for(url + "/metrics", "specdec_up 1.0")
        assert f'specdec_drafts_total{{engine="0",model_name="{MODEL}"}} 7380.0' in text
        assert httpx.get(url + "/readyz").status_code == 200
        vllm.serve("<html>oops</html>\n", status=200)
        text = wait_for(url + "/metrics", 'specdec_scrape_failures_total{reason="parse"} ')
        wait_for(url + "/metrics", "specdec_up 0.0")
        vllm.serve("", status=503)
        wait_for(url + "/metrics", 'specdec_scrape_failures_total{reason="http_status"} 1')
        assert httpx.get(url + "/healthz").status_code == 200
        vllm.serve(capture("t4"))
        text = wait_for(url + "/metrics", "specdec_up 1.0")
        wait_for(url + "/metrics", f'specdec_drafts_total{{engine="0",model_name="{MODEL}"}} 11033')
    failures = [r for r in records if r.get("msg") == "vLLM scrape failed"]
    assert {r["reason"] for r in failures} >= {"parse", "http_status"}
    recovered = [r for r in records if r.get("msg") == "vLLM scrape recovered"]
    assert recovered and int(str(recovered[0]["failed_polls"])) >= 2


def test_check_on_a_legacy_v0_server_uses_its_own_gauge() -> None:
    v0 = FIXTURES / "vllm-0.7.3"
    with vllm_serving(
        (v0 / "v0_spec_ngram_k4.t3.prom").read_text(), (v0 / "v0_spec_ngram_k4.t6.prom").read_text()
    ) as vllm:
        result = run_check(vllm)
    assert result.returncode == 1, result.stderr  # V0's own since-start rate 0.564: borderline
    assert "legacy V0: see its own gauges" in result.stdout
    assert "acceptance rate since start 0.5641444277391467" in result.stdout
    assert "not drafting" not in result.stdout

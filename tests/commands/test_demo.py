"""The demo: its screen from a literal report, and a short real run that leaves nothing behind."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from specdec_exporter.commands.demo import (
    DEMO_MIX,
    DemoSettings,
    Links,
    configure,
    render_screen,
    sidecar_command,
    summary_lines,
)
from specdec_exporter.commands.flags import settings_from_args
from specdec_exporter.core.buckets import DEFAULT_EDGES, TemperatureBuckets
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.runner import Progress

LINKS = Links("http://127.0.0.1:8000", "http://127.0.0.1:10088", "http://127.0.0.1:10089", True)
DEMO = [sys.executable, "-m", "specdec_exporter.cli", "demo"]

REPORT = {
    "up": True,
    "window_seconds": 10.0,
    "entries": [
        {
            "model_name": "m",
            "engine": "0",
            "acceptance_rate": 0.25,
            "mean_acceptance_length": 1.9,
            "estimated_speedup": 1.36,
            "drafts_per_second": 1300.5,
            "verdict": "disable",
        },
        {
            "model_name": "m",
            "engine": "all",
            "acceptance_rate": 0.25,
            "mean_acceptance_length": 1.9,
            "estimated_speedup": 1.36,
            "drafts_per_second": 1300.5,
            "verdict": "disable",
        },
    ],
    "temperature_split_source": "probe",
    "buckets": [
        {
            "model_name": "m",
            "temperature_bucket": bucket,
            "acceptance_rate": rate,
            "mean_acceptance_length": 1 + 4 * rate,
            "estimated_speedup": (1 + 4 * rate) / 1.4,
            "drafts_per_second": 300.0,
            "verdict": "borderline" if rate > 0.5 else "below threshold",
        }
        for bucket, rate in (("0-0.5", 0.61), ("0.7-1.0", 0.18))
    ],
    "tables": [],
}


def test_screen_shows_figures_drafter_state_and_buckets() -> None:
    screen = render_screen(
        REPORT,
        links=LINKS,
        elapsed=65,
        duration=120,
        degraded_at=60.2,
        progress=Progress(done=812, errors=3, elapsed=65),
        simulated=True,
    )
    assert "drafter: DEGRADED at 60 s" in screen
    assert "load: 812 requests, 3 errors" in screen
    assert "m       0.250  1.900     1.360  1300.500  disable" in screen
    assert "By temperature bucket (engine probe, window)" in screen
    assert re.search(
        r"^0\.7-1\.0 +0\.180  1\.720 +1\.229 +300\.000  below threshold$", screen, re.M
    )


def engine_column(screen: str) -> list[str]:
    """The engine of each row of the first table (the model rows); none with one engine."""
    first = screen.partition("By temperature bucket")[0].splitlines()
    if not any(line.startswith("model  engine") for line in first):
        return []
    return [line.split()[1] for line in first if line.startswith("m  ")]


def test_one_engine_shows_no_all_row_and_two_engines_do() -> None:
    one = render_screen(
        REPORT, links=LINKS, elapsed=1, duration=9, degraded_at=None, progress=None, simulated=True
    )
    assert engine_column(one) == []
    second = {**REPORT["entries"][0], "engine": "1"}  # type: ignore[index]
    two = render_screen(
        {**REPORT, "entries": [REPORT["entries"][0], second, REPORT["entries"][1]]},  # type: ignore[index]
        links=LINKS,
        elapsed=1,
        duration=9,
        degraded_at=None,
        progress=None,
        simulated=True,
    )
    assert engine_column(two) == ["0", "1", "all"]


@pytest.mark.parametrize("finished", [False, True])
def test_every_frame_starts_with_the_live_page_and_how_to_stop(finished: bool) -> None:
    screen = render_screen(
        {"up": False},
        links=LINKS,
        elapsed=0,
        duration=10,
        degraded_at=None,
        progress=None,
        simulated=False,
        finished=finished,
    )
    first = screen.splitlines()[0]
    assert first.startswith("live page: http://127.0.0.1:10088/  (")
    stop = "the demo is over" if finished else "Ctrl-C stops everything"
    assert stop in first
    assert "request tap (OpenAI-compatible): http://127.0.0.1:10089/v1" in screen


def test_screen_before_any_data() -> None:
    screen = render_screen(
        {"up": False},
        links=LINKS,
        elapsed=0,
        duration=10,
        degraded_at=None,
        progress=None,
        simulated=False,
    )
    assert "vLLM DOWN" in screen and "drafter: real vLLM" in screen


def test_the_mix_sends_traffic_to_every_default_bucket() -> None:
    buckets = TemperatureBuckets(DEFAULT_EDGES)
    temperatures = [entry.temperature for entry in parse_mix(DEMO_MIX)]
    assert sorted({buckets.label_for(t or 0.0) for t in temperatures}) == sorted(buckets.labels)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_vllm_is_one_line_and_exit_3() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = subprocess.run(
        [*DEMO, "--vllm-url", url + "/v1", "--duration", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        f"specdec-exporter demo: vLLM at {url} did not answer: GET /v1/models: cannot connect. "
        "Is it running there? --vllm-url takes its base URL, http://HOST:PORT, with or without "
        "/v1\n"
    )


CLEAR = "\x1b[H\x1b[2J"


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a terminal")
def test_on_a_terminal_the_last_frame_still_shows_the_live_page() -> None:
    """Under a real terminal each frame clears the screen: the URL must be in the last one."""
    command = " ".join([*DEMO, "--duration", "4", "--refresh", "1", "--concurrency", "2"])
    result = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:]
    frames = result.stdout.split(CLEAR)
    assert len(frames) >= 3, result.stdout[-2000:]
    last = frames[-1]
    page = re.search(r"live page: (http://127\.0\.0\.1:\d+/)", last)
    assert page is not None, last
    assert "the demo is over" in last
    assert all(f"live page: {page.group(1)}  (Ctrl-C stops everything)" in f for f in frames[1:-1])
    assert last.count("live page: ") == 1, "the last frame alone on the cleared screen"
    assert "next: specdec-exporter check --vllm-url" in last


def process_stats() -> dict[int, list[str]]:
    """Every live process' /proc stat fields after the command name: state, ppid, pgrp, ..."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    found[int(entry)] = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
    return found


def children_of(pid: int) -> list[int]:
    return [child for child, fields in process_stats().items() if int(fields[1]) == pid]


def test_short_demo_runs_degrades_and_leaves_no_process() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec_exporter.cli",
            "demo",
            "--duration",
            "6",
            "--refresh",
            "1",
            "--concurrency",
            "4",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sidecar_pids = []
    stdout, stderr = "", ""
    try:
        while process.poll() is None and not sidecar_pids:
            sidecar_pids = children_of(process.pid)
            time.sleep(0.02)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-2000:]
    assert "live page: http://127.0.0.1:" in stdout
    degraded = re.search(r"drafter: DEGRADED at (\d+) s", stdout)
    assert degraded is not None, stdout[-2000:]
    assert 3 <= int(degraded.group(1)) <= 6  # halfway, at the first refresh from then on
    last_frame = stdout.rpartition("live page: ")[2]
    assert re.search(r"^Llama-3\.1-8B-Instruct +0\.\d{3} ", last_frame, re.MULTILINE)
    assert "Instruct  all" not in last_frame  # one engine: no "all" row repeating it
    # The simulator serves the engine probe, so the split comes from it (the tap's is withheld).
    assert "request tap" not in last_frame.partition("By temperature bucket")[2]
    final = last_frame.rpartition("By temperature bucket (engine probe, window)")
    for bucket in ("0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+"):
        assert re.search(rf"^{re.escape(bucket)} +0\.\d{{3}}", final[2], re.MULTILINE), final[2]
    assert "By load level (engine probe" in last_frame  # not a terminal: no row limit
    assert re.search(r"^summary: \d+ requests, 0 errors$", last_frame, re.MULTILINE)
    assert "with the good drafter," in last_frame and "after it degraded at" in last_frame
    assert (
        stdout.splitlines()[-2] == "next: specdec-exporter check --vllm-url http://YOUR-VLLM:8000"
    )
    assert sidecar_pids, "the demo should run the sidecar as a child process"
    assert not [pid for pid in sidecar_pids if os.path.exists(f"/proc/{pid}")]


def group_members(pgid: int) -> list[int]:
    return [
        member
        for member, fields in process_stats().items()
        if int(fields[2]) == pgid and fields[0] != "Z"
    ]


def test_ctrl_c_stops_everything() -> None:
    """SIGINT to the whole process group, as a terminal sends it."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec_exporter.cli",
            "demo",
            "--duration",
            "120",
            "--refresh",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # the first live table means everything is running
            if line.startswith("demo "):
                break
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr
    assert group_members(process.pid) == []


# --- issue 29 item 15: 80x24, --listen and SPECDEC_LISTEN, the last frame's summary -----------

BIG_REPORT = {
    "up": True,
    "window_seconds": 10.0,
    "temperature_split_source": "probe",
    "entries": [
        {**REPORT["entries"][0], "model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": e}  # type: ignore[index]
        for e in ("0", "1", "all")
    ],
    "buckets": [
        {
            **REPORT["buckets"][0],
            "model_name": "meta-llama/Llama-3.1-8B-Instruct",
            "temperature_bucket": b,
        }  # type: ignore[index]
        for b in ("0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+")
    ],
    "batch_buckets": [
        {
            "model_name": "meta-llama/Llama-3.1-8B-Instruct",
            "engine": engine,
            "batch_bucket": bucket,
            "steps": 1830.0,
            "acceptance_rate": 0.5,
            "mean_acceptance_length": 3.0,
            "estimated_speedup": 2.1,
            "verdict": "borderline",
        }
        for engine in ("0", "1")
        for bucket in ("1", "2-4", "5-8", "9-16", "17-32", "33-64")
    ],
}
SUMMARY = ["summary: 10 requests, 0 errors", "  acceptance 0.9 (healthy)", "next: x", "  (y)"]


@pytest.mark.parametrize("finished", [False, True])
def test_a_frame_fits_80x24_and_starts_with_the_live_page(finished: bool) -> None:
    screen = render_screen(
        BIG_REPORT,
        links=LINKS,
        elapsed=30,
        duration=90,
        degraded_at=None,
        progress=Progress(done=81200, errors=3000, elapsed=30),
        simulated=True,
        finished=finished,
        summary=SUMMARY if finished else (),
        size=(80, 24),
    )
    lines = screen.splitlines()
    assert len(lines) <= 23, "one line left for the cursor: the first line never scrolls off"
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith("live page: http://127.0.0.1:10088/  (")
    assert "By temperature bucket (engine probe, window)" in screen
    assert "(1 more table on the live page, its URL on the first line)" in screen  # the load levels
    assert lines[-len(SUMMARY) :] == SUMMARY if finished else lines[-1].startswith("* modelled")


def test_without_a_row_limit_every_table_is_shown() -> None:
    screen = render_screen(
        BIG_REPORT,
        links=LINKS,
        elapsed=30,
        duration=90,
        degraded_at=None,
        progress=None,
        simulated=True,
        size=(80, None),
    )
    assert "By load level (engine probe" in screen and "more table" not in screen
    assert re.search(r" 9-16 +1830 ", screen), "steps are whole"


def test_a_frame_without_figures_yet_has_no_window_to_show() -> None:
    """/api/report's window_seconds is null until figures exist (it crashed the frame)."""
    screen = render_screen(
        {"up": True, "window_seconds": None, "configured_window_seconds": 10},
        links=LINKS,
        elapsed=0,
        duration=10,
        degraded_at=None,
        progress=None,
        simulated=True,
    )
    assert "vLLM up  sidecar window 10 s" in screen


def test_the_summary_says_what_happened_and_what_to_run_next() -> None:
    before = {"acceptance_rate": 0.862, "verdict": "healthy"}
    after = {"acceptance_rate": 0.451, "verdict": "disable"}
    lines = summary_lines(
        before=before, after=after, degraded_at=45.2, requests=812, errors=0, links=LINKS
    )
    assert lines == [
        "summary: 812 requests, 0 errors",
        "  acceptance 0.862 (healthy) with the good drafter,",
        "  acceptance 0.451 (disable) after it degraded at 45 s",
        "next: specdec-exporter check --vllm-url http://YOUR-VLLM:8000",
        "      (a verdict for your vLLM in seconds; Kubernetes: the README's quick start)",
    ]
    real = Links("http://vllm:8000", "http://127.0.0.1:10088", None, False)
    (_, figure, next_command, _) = summary_lines(
        before=None, after=after, degraded_at=None, requests=5, errors=1, links=real
    )
    assert figure == "  acceptance 0.451 (disable) over the last window"
    assert next_command == "next: specdec-exporter check --vllm-url http://vllm:8000"


def test_listen_comes_from_the_flag_else_specdec_listen(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    monkeypatch.setenv("SPECDEC_LISTEN", "127.0.0.1:18088")
    assert settings_from_args(DemoSettings, parser.parse_args([])).listen == "127.0.0.1:18088"
    flagged = parser.parse_args(["--listen", "127.0.0.1:18089"])
    assert settings_from_args(DemoSettings, flagged).listen == "127.0.0.1:18089"
    monkeypatch.delenv("SPECDEC_LISTEN")
    assert settings_from_args(DemoSettings, parser.parse_args([])).listen == "127.0.0.1:0"
    command = sidecar_command(DemoSettings(), tap=False, listen="127.0.0.1:18089")
    assert command[command.index("--listen") + 1] == "127.0.0.1:18089"


def test_the_demo_serves_its_live_page_where_specdec_listen_says() -> None:
    port = closed_port()
    result = subprocess.run(
        [*DEMO, "--duration", "2", "--refresh", "1", "--concurrency", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SPECDEC_LISTEN": f"127.0.0.1:{port}"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"live page: http://127.0.0.1:{port}/  (")

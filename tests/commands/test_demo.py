"""The demo: its screen from a literal report, and a short real run that leaves nothing behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from specdec_exporter.commands.demo import render_screen
from specdec_exporter.devtools.load.runner import Progress

REPORT = {
    "up": True,
    "window_seconds": 10.0,
    "entries": [
        {
            "model_name": "m",
            "engine": "all",
            "acceptance_rate": 0.25,
            "mean_acceptance_length": 1.9,
            "estimated_speedup": 1.36,
            "drafts_per_second": 1300.5,
            "verdict": "disable",
        }
    ],
    "tables": [
        {"title": "engines", "headers": [], "rows": []},
        {
            "title": "Acceptance by temperature bucket",
            "headers": ["model", "bucket", "rate"],
            "rows": [["m", "0-0.5", 0.61], ["m", "0.7-1.0", 0.18]],
        },
    ],
}


def test_screen_shows_figures_drafter_state_and_buckets() -> None:
    screen = render_screen(
        REPORT,
        elapsed=65,
        duration=120,
        degraded_at=60.2,
        progress=Progress(done=812, errors=3, elapsed=65),
        simulated=True,
    )
    assert "drafter: DEGRADED at 60 s" in screen
    assert "load: 812 requests, 3 errors" in screen
    assert "m      all          0.250     1.900     1.360  1300.500  disable" in screen
    assert "Acceptance by temperature bucket" in screen and "0.7-1.0" in screen


def test_screen_before_any_data() -> None:
    screen = render_screen(
        {"up": False}, elapsed=0, duration=10, degraded_at=None, progress=None, simulated=False
    )
    assert "vLLM DOWN" in screen and "drafter: real vLLM" in screen


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
    assert "sidecar: http://127.0.0.1:" in stdout
    degraded = re.search(r"drafter: DEGRADED at (\d+) s", stdout)
    assert degraded is not None, stdout[-2000:]
    assert 3 <= int(degraded.group(1)) <= 6  # halfway, at the first refresh from then on
    assert "meta-llama/Llama-3.1-8B-Instruct  all" in stdout
    assert "load: " in stdout and " 0 errors" in stdout.splitlines()[-1]
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
            if line.startswith("vllm-specdec-exporter demo"):
                break
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr
    assert group_members(process.pid) == []

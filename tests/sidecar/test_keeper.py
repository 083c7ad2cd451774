"""Issue 26, section 6: the container's keeper never ends because of the sidecar.

A native sidecar that is not running makes vLLM's pod NotReady, and one that exits before the
kubelet saw it run holds back vLLM's start; the keeper is the container's process instead
(deploy/components/sidecar) and starts the sidecar again whatever it does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from fakevllm import fake_vllm
from specdec_exporter.sidecar import keeper
from specdec_exporter.sidecar.config import Settings
from variants import capture

KEEPER = [sys.executable, "-m", "specdec_exporter.sidecar.keeper"]


@contextmanager
def kept(*command: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [*KEEPER, *command],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()


def restart_lines(process: subprocess.Popen[str], count: int) -> list[dict[str, object]]:
    """The keeper's first ``count`` restart lines (the others are the sidecar's own)."""
    assert process.stderr is not None
    found: list[dict[str, object]] = []
    for line in process.stderr:
        if not line.startswith("{"):
            continue  # the sidecar's own one-line config error
        record = json.loads(line)
        if record.get("component") == "keeper":
            found.append(record)
            if len(found) == count:
                return found
    raise AssertionError(f"the keeper wrote {len(found)} restart lines, then stopped")


def test_a_config_error_of_the_real_run_is_retried_and_never_ends_the_container() -> None:
    """Before: the container's process was `run` itself, which exits 64 on a bad setting; a
    native sidecar that exits at start never counts as started, so vLLM never started."""
    console_script = str(Path(sys.executable).with_name("specdec-exporter"))
    with kept(console_script, "run", env={"SPECDEC_INTERVAL": "-1"}) as process:
        first, second = restart_lines(process, 2)
        assert (first["exit_code"], first["retry_in"], first["restarts"]) == (64, 1.0, 1)
        assert (second["exit_code"], second["retry_in"], second["restarts"]) == (64, 2.0, 2)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)  # in its backoff: it exits at once
        assert process.wait(timeout=10) == 0


def test_the_real_run_under_the_keeper_serves_and_stops_with_exit_0_on_sigterm() -> None:
    console_script = str(Path(sys.executable).with_name("specdec-exporter"))
    with (
        fake_vllm(capture("t3")) as vllm,
        kept(console_script, "run", "--vllm-url", vllm.url, "--listen", "127.0.0.1:0") as process,
    ):
        assert process.stderr is not None
        for line in process.stderr:
            if '"msg": "listening"' in line:
                address = json.loads(line)["address"]
                break
        assert httpx.get(f"http://{address}/healthz", timeout=5).text == "ok\n"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_sigterm_goes_to_the_sidecar_and_its_exit_code_is_the_containers() -> None:
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [*KEEPER, sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "up\n"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 3
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the keeper did not start the sidecar again"
        time.sleep(0.05)


@contextmanager
def keeping(target: keeper.Keeper) -> Iterator[None]:
    thread = threading.Thread(target=target.run, kwargs={"take_signals": False}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        target.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_a_sidecar_that_stops_answering_healthz_is_killed_and_started_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keeper, "HEALTH_PERIOD", 0.1)
    monkeypatch.setattr(keeper, "STARTUP_GRACE", 0.0)
    monkeypatch.setattr(keeper, "WATCH_PERIOD", 0.05)
    monkeypatch.setattr(keeper, "FIRST_BACKOFF", 0.05)
    hung = keeper.Keeper(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        health="http://127.0.0.1:9/healthz",  # nothing answers there
        memory_ceiling=None,
    )
    with keeping(hung):
        wait_until(lambda: hung.restarts >= 1)
    assert hung.reasons[0].startswith("hung: http://127.0.0.1:9/healthz failed 3 times")


def test_a_sidecar_over_the_memory_ceiling_is_killed_and_started_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keeper, "WATCH_PERIOD", 0.05)
    monkeypatch.setattr(keeper, "FIRST_BACKOFF", 0.05)
    grown = keeper.Keeper(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        health="http://127.0.0.1:9/healthz",
        memory_ceiling=1 << 20,  # any Python is over 1 MiB
    )
    with keeping(grown):
        wait_until(lambda: grown.restarts >= 1)
    assert grown.reasons[0].startswith("memory: ")


def test_the_memory_limit_is_read_from_cgroup_v2_or_v1(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "limit_in_bytes"
    v2.write_text("536870912\n")
    assert keeper.memory_limit((v2, v1)) == 512 << 20
    v2.write_text("max\n")
    assert keeper.memory_limit((v2, v1)) is None
    v1.write_text("9223372036854771712\n")  # cgroup v1's "no limit"
    assert keeper.memory_limit((tmp_path / "absent", v1)) is None


def test_the_health_url_is_the_sidecars_listen_address_over_loopback() -> None:
    assert keeper.health_url(Settings().listen) == "http://127.0.0.1:10088/healthz"
    assert keeper.health_url(keeper.DEFAULT_LISTEN) == keeper.health_url(Settings().listen)
    assert keeper.health_url("[::]:9") == "http://[::1]:9/healthz"
    assert keeper.health_url("10.0.0.2:9") == "http://10.0.0.2:9/healthz"

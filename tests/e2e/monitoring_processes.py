"""Start a real Prometheus and Alertmanager on free loopback ports in a temp dir; stop by PID.

Binaries come from PATH (Debian: `prometheus`, `prometheus-alertmanager`; upstream:
`alertmanager`). Each process logs to a file in its directory, shown when it fails to start.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
POLL_INTERVAL = 0.2

PROMETHEUS_BINARIES = ("prometheus",)
ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")


def find_binary(candidates: tuple[str, ...]) -> str | None:
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    """A port the OS considers free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `condition` until true; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(POLL_INTERVAL)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self) -> None:
        """Terminate this process (by its PID), kill it if it does not exit in time."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=STOP_TIMEOUT)

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def start_prometheus(
    binary: str,
    workdir: Path,
    *,
    rules_file: Path,
    scrape_targets: list[str],
    alertmanager_url: str | None,
    interval: str = "1s",
    target_labels: dict[str, str] | None = None,
    job: str = "specdec-exporter",
    other_jobs: dict[str, list[str]] | None = None,
) -> Process:
    """Prometheus scraping `scrape_targets` (host:port) as `job`, and each of `other_jobs`
    (job -> targets) as that job, all with `target_labels`, evaluating `rules_file`."""
    workdir.mkdir(parents=True, exist_ok=True)
    jobs = {job: scrape_targets, **(other_jobs or {})}
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules_file)],
        "scrape_configs": [
            {
                "job_name": name,
                "static_configs": [{"targets": targets, "labels": target_labels or {}}],
            }
            for name, targets in jobs.items()
        ],
    }
    if alertmanager_url is not None:
        host = alertmanager_url.removeprefix("http://")
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    args = [
        binary,
        f"--config.file={config_file}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={workdir / 'data'}",
        "--rules.alert.resend-delay=1s",
        "--log.level=warn",
    ]
    return _start("prometheus", args, workdir, f"http://127.0.0.1:{port}")


def start_alertmanager(binary: str, workdir: Path, config: dict[str, Any]) -> Process:
    """Alertmanager with `config`, clustering off (it would bind 0.0.0.0:9094 otherwise)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "alertmanager.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    args = [
        binary,
        f"--config.file={config_file}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.path={workdir / 'data'}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    return _start("alertmanager", args, workdir, f"http://127.0.0.1:{port}")


def _start(name: str, args: list[str], workdir: Path, url: str) -> Process:
    log = workdir / f"{name}.log"
    with log.open("wb") as sink:
        popen = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, cwd=workdir)
    process = Process(name, popen, url, log)
    try:
        wait_until(lambda: _ready(process), READY_TIMEOUT, f"{name} at {url} to be ready")
    except AssertionError as exc:
        process.stop()
        raise AssertionError(f"{exc}\n{name} log:\n{process.log_tail()}") from None
    return process


def _ready(process: Process) -> bool:
    if process.popen.poll() is not None:
        raise AssertionError(f"{process.name} exited with {process.popen.returncode}")
    try:
        return httpx.get(process.url + "/-/ready", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False

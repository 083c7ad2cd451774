"""The alerting stack every end-to-end test runs: generated files (short `for`), a real Prometheus
and Alertmanager, and the PagerDuty stub; plus the queries and the background load they share.

Used by tests/e2e (fake exporter, simulator) and tests/real_vllm (a real vLLM).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from monitoring_processes import (
    ALERTMANAGER_BINARIES,
    PROMETHEUS_BINARIES,
    Process,
    start_alertmanager,
    start_prometheus,
)
from pagerduty_stub import PagerDutyStub
from required_tools import require
from specdec_artifacts.alertmanager import DEFAULT_RECEIVER, Endpoints, standalone_config
from specdec_artifacts.settings import CONFIG_PATH, REPO_ROOT, load, with_test_overrides

from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.runner import run_load

FOR, WINDOW, GROUP_TIMING, SCRAPE = "3s", "10s", "1s", "1s"
ROUTING_KEY = "e2e-routing-key"
EVENT_TIMEOUT = 60.0
TARGET_LABELS = {"namespace": "e2e", "pod": "vllm-e2e-0"}


@dataclass
class Stack:
    stub: PagerDutyStub
    prometheus: Process
    alertmanager: Process
    generated: Path
    """The generator's output (alerts/, dashboards/) for this stack."""


@contextmanager
def alerting(work: Path) -> Iterator[tuple[Process, PagerDutyStub]]:
    """The generated routing in a real Alertmanager, posting to a PagerDuty stub."""
    binary = require(*ALERTMANAGER_BINARIES)
    stub = PagerDutyStub().start()
    try:
        alertmanager = start_alertmanager(
            binary, work / "alertmanager", alertmanager_config(work, stub)
        )
        try:
            yield alertmanager, stub
        finally:
            alertmanager.stop()
    finally:
        stub.stop()


@contextmanager
def running_stack(
    work: Path,
    scrape_targets: list[str],
    *,
    config: Path = CONFIG_PATH,
    other_jobs: dict[str, list[str]] | None = None,
) -> Iterator[Stack]:
    """Prometheus scraping ``scrape_targets`` (host:port) with the generated rules (built from
    ``config``), alerting through ``alerting``; each job's targets carry TARGET_LABELS."""
    prometheus_binary = require(*PROMETHEUS_BINARIES)
    generated = generate_test_variant(work / "generated", config)
    with alerting(work) as (alertmanager, stub):
        prometheus = start_prometheus(
            prometheus_binary,
            work / "prometheus",
            rules_file=generated / "alerts" / "specdec-rules.yaml",
            scrape_targets=scrape_targets,
            other_jobs=other_jobs,
            alertmanager_url=alertmanager.url,
            interval=SCRAPE,
            target_labels=TARGET_LABELS,
        )
        try:
            yield Stack(stub, prometheus, alertmanager, generated)
        finally:
            prometheus.stop()


def generate_test_variant(out_dir: Path, config: Path = CONFIG_PATH) -> Path:
    """The generator's own test option: every file with short `for` and windows."""
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "tools" / "generate.py"),
            "--config",
            str(config),
            "--out-dir",
            str(out_dir),
            "--for",
            FOR,
            "--rate-window",
            WINDOW,
            "--group-timing",
            GROUP_TIMING,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out_dir


def alertmanager_config(work: Path, stub: PagerDutyStub) -> dict[str, Any]:
    """The generated routing under a root whose default receiver posts to the stub's /default,
    with our receivers pointed at the stub."""
    key_file, chat_file = work / "routing-key", work / "chat-url"
    key_file.write_text(ROUTING_KEY)
    chat_file.write_text(stub.base_url + "/chat")
    settings = with_test_overrides(load(), group_timing=GROUP_TIMING)
    default = {
        "name": DEFAULT_RECEIVER,
        "webhook_configs": [{"url": stub.base_url + "/default", "send_resolved": False}],
    }
    return standalone_config(settings, Endpoints(stub.url, str(key_file), str(chat_file)), default)


def instant(prometheus: Process, query: str) -> list[dict[str, Any]]:
    reply = httpx.get(prometheus.url + "/api/v1/query", params={"query": query}, timeout=5.0)
    reply.raise_for_status()
    result: list[dict[str, Any]] = reply.json()["data"]["result"]
    return result


def bucket_acceptance(prometheus: Process) -> dict[str, float]:
    rule = (
        f"instance_model_name_temperature_bucket:specdec_request_acceptance_rate:ratio_rate{WINDOW}"
    )
    return {
        s["metric"]["temperature_bucket"]: float(s["value"][1]) for s in instant(prometheus, rule)
    }


def chat_mentions(stub: PagerDutyStub, text: str) -> bool:
    return any(text in json.dumps(post.body) for post in stub.posts("/chat"))


class BackgroundLoad:
    """Runs ``config``'s load again and again in a thread until the block ends; counts errors."""

    def __init__(self, config: LoadConfig) -> None:
        self._config = config
        self._stop = threading.Event()
        self.errors = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            result = asyncio.run(run_load(self._config))
            self.errors += sum(1 for r in result.results if r.error)

    def __enter__(self) -> BackgroundLoad:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

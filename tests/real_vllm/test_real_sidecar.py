"""Real vLLM: `specdec-exporter check` and `run` report exactly what the known traffic produced.

Both commands run as subprocesses while a phase of seeded requests runs; their figures are compared
with the per-request metrics and the `/metrics` deltas of the same phase.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from real_vllm.traffic import (
    MODEL,
    NUM_SPEC_TOKENS,
    Phase,
    Request,
    run_phase,
    samples,
    temperature_requests,
)
from scrape_spy import ScrapeSpy

pytestmark = pytest.mark.real_vllm

CHECK_WINDOW_S = 15.0
"""Long enough for a phase of 8 requests plus the counters settling, on a busy 2-core machine."""
EXIT_CODES = {
    "healthy": 0,
    "borderline": 1,
    "below threshold": 1,
    "not drafting": 1,
    "disable": 2,
    "not enabled": 2,
}
MIRRORED = {
    "vllm:spec_decode_num_drafts_total": "specdec_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total": "specdec_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total": "specdec_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": (
        "specdec_accepted_tokens_per_position_total"
    ),
    "vllm:generation_tokens_total": "specdec_generation_tokens_total",
}
MIRROR_LABELS = ("model_name", "engine", "position")

T = TypeVar("T")
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def command(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "specdec_exporter.cli", name, *args]


def eventually(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll `probe` until it returns something other than None, or fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while (result := probe()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)
    return result


@pytest.fixture
def stopped_on_exit() -> Iterator[list[subprocess.Popen[str]]]:
    """Subprocesses a test appends here are ended when it finishes, pass or fail."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run_check(
    url: str, window_s: float, processes: list[subprocess.Popen[str]], *extra: str
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        command("check", "--vllm-url", url, "--window", str(window_s), "--json", *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    return process


def finished_check(process: subprocess.Popen[str], timeout_s: float) -> tuple[int, dict[str, Any]]:
    out, err = process.communicate(timeout=timeout_s)
    try:
        return process.returncode, json.loads(out)
    except ValueError:
        raise AssertionError(
            f"check printed no JSON (exit {process.returncode}):\n{out}\n{err}"
        ) from None


def entries_by_engine(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["engine"]: entry for entry in report["entries"] if entry["model_name"] == MODEL}


def expected_figures(phase: Phase) -> dict[str, Any]:
    counts = phase.per_request_sum
    return {
        "drafts": counts.drafts,
        "draft_tokens": counts.draft_tokens,
        "accepted_tokens": counts.accepted_tokens,
        "acceptance_rate": pytest.approx(counts.acceptance_rate, rel=1e-9),
        "mean_acceptance_length": pytest.approx(counts.mean_acceptance_length, rel=1e-9),
        "per_position_acceptance_rate": pytest.approx(
            [accepted / counts.drafts for accepted in counts.accepted_per_position], rel=1e-9
        ),
    }


@pytest.mark.parametrize(
    ("temperature", "extra", "verdict"),
    [
        (0.0, (), "healthy"),
        # Acceptance below 0.5 at T=1, but with c = 0.1 the modelled speedup stays above 1.
        (1.0, (), "below threshold"),
        # c = 1.5: the break-even acceptance is 1.5 > 1, no acceptance pays: a net loss.
        (1.0, ("--draft-cost-ratio", "1.5"), "disable"),
    ],
)
def test_check_reports_the_phase_in_its_window(
    *,
    real_vllm: Any,
    vllm: httpx.Client,
    stopped_on_exit: list[subprocess.Popen[str]],
    temperature: float,
    extra: tuple[str, ...],
    verdict: str,
) -> None:
    with ScrapeSpy(real_vllm.url).running() as spy:
        process = run_check(spy.url, CHECK_WINDOW_S, stopped_on_exit, *extra)
        assert spy.wait_for_scrapes(1, timeout_s=60), "check never scraped /metrics"
        phase = run_phase(vllm, f"check T={temperature}", temperature_requests(temperature, 8))
        assert process.poll() is None, f"window {CHECK_WINDOW_S} s closed before the phase settled"
        code, report = finished_check(process, timeout_s=CHECK_WINDOW_S + 60)
    assert phase.per_request_sum == phase.counter_delta
    entries = entries_by_engine(report)
    assert set(entries) == {"0", "all"}, report
    for engine, entry in entries.items():
        figures = {key: entry[key] for key in expected_figures(phase)}
        assert figures == expected_figures(phase), f"engine {engine}: {entry}"
        assert entry["estimated_speedup"] is not None
    assert entries["all"]["verdict"] == verdict, entries["all"]
    assert code == EXIT_CODES[verdict]


def test_check_without_traffic_says_not_drafting(
    real_vllm: Any, stopped_on_exit: list[subprocess.Popen[str]]
) -> None:
    code, report = finished_check(run_check(real_vllm.url, 1.0, stopped_on_exit), 60)
    entry = entries_by_engine(report)["all"]
    assert (entry["drafts"], entry["verdict"], code) == (0, "not drafting", 1), report


def test_check_of_a_server_without_speculation_says_not_enabled(
    real_vllm_nospec: Any, stopped_on_exit: list[subprocess.Popen[str]]
) -> None:
    code, report = finished_check(run_check(real_vllm_nospec.url, 1.0, stopped_on_exit), 60)
    assert (report["verdict"], code) == ("not enabled", 2), report


def test_check_of_a_closed_port_says_unreachable(
    stopped_on_exit: list[subprocess.Popen[str]],
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, report = finished_check(run_check(url, 1.0, stopped_on_exit), 60)
    assert (report["verdict"], code) == ("unreachable", 3), report


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def project(text: str, names: dict[str, str]) -> Series:
    """Samples of the named series, renamed, with only the mirrored labels kept."""
    projected: Series = {}
    for (name, labels), value in samples(text, list(names)).items():
        kept = tuple((key, val) for key, val in labels if key in MIRROR_LABELS)
        projected[(names[name], kept)] = value
    return projected


def sidecar_series(text: str) -> Series:
    return project(text, {name: name for name in MIRRORED.values()})


def mirrored_when_equal(sidecar: httpx.Client, vllm_text: str) -> Callable[[], Series | None]:
    """A probe: the sidecar's series once they equal vLLM's (as read from `vllm_text`)."""
    expected = project(vllm_text, MIRRORED)

    def probe() -> Series | None:
        try:
            current = sidecar_series(sidecar.get("/metrics").text)
        except httpx.TransportError:
            return None
        return current if current == expected else None

    return probe


def describe_mismatch(sidecar: httpx.Client, vllm_text: str) -> str:
    expected = project(vllm_text, MIRRORED)
    try:
        actual = sidecar_series(sidecar.get("/metrics").text)
    except httpx.TransportError as failure:
        return f"sidecar unreachable: {failure}"
    lines = [
        f"{key}: vLLM {expected.get(key)} sidecar {actual.get(key)}"
        for key in sorted(expected.keys() | actual.keys())
        if expected.get(key) != actual.get(key)
    ]
    return "\n".join(lines)


def test_run_mirrors_vllm_counters_through_a_phase(
    real_vllm: Any, vllm: httpx.Client, stopped_on_exit: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    listen = f"127.0.0.1:{free_port()}"
    log_path = tmp_path / "sidecar.log"
    with log_path.open("w") as log:
        stopped_on_exit.append(
            subprocess.Popen(
                command(
                    "run", "--vllm-url", real_vllm.url, "--listen", listen, "--interval", "0.5"
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    requests = [
        Request((0.0, 0.4, 0.8, 1.0)[index % 4], stream=index % 2 == 0, seed=300 + index)
        for index in range(8)
    ]
    with httpx.Client(base_url=f"http://{listen}", timeout=10, trust_env=False) as sidecar:
        reference = vllm.get("/metrics").text
        try:
            before = eventually(
                mirrored_when_equal(sidecar, reference),
                60,
                "the sidecar to mirror vLLM's counters before the phase",
            )
            phase = run_phase(vllm, "sidecar run", requests, concurrency=2)
            reference = vllm.get("/metrics").text
            after = eventually(
                mirrored_when_equal(sidecar, reference),
                30,
                "the sidecar to mirror vLLM's counters after the phase",
            )
        except AssertionError as failure:
            raise AssertionError(
                f"{failure}\n{describe_mismatch(sidecar, reference)}\n"
                f"sidecar log:\n{log_path.read_text()[-3000:]}"
            ) from None
    assert phase.per_request_sum == phase.counter_delta
    expected_delta = phase.per_request_sum
    engine = (("engine", "0"), ("model_name", MODEL))

    def delta(name: str, labels: tuple[tuple[str, str], ...] = engine) -> int:
        return round(after[(name, labels)] - before[(name, labels)])

    assert delta("specdec_drafts_total") == expected_delta.drafts
    assert delta("specdec_draft_tokens_total") == expected_delta.draft_tokens
    assert delta("specdec_accepted_tokens_total") == expected_delta.accepted_tokens
    per_position = [
        delta("specdec_accepted_tokens_per_position_total", (*engine, ("position", str(position))))
        for position in range(NUM_SPEC_TOKENS)
    ]
    assert tuple(per_position) == expected_delta.accepted_per_position
    assert delta("specdec_generation_tokens_total") == phase.completion_tokens

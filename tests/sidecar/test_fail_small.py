"""Fail small (issue 26): what vLLM really emits never ends `specdec-exporter run` or its tap.

Each window below ended the process before the poll's fold was guarded and the core made total
("poller failed; exiting: ZeroDivisionError" / "ValueError"): they run through the real `run`
command as the sidecar runs, with a stand-in vLLM serving literal /metrics text.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import sidecar_process as sidecar_process_module
from fakevllm import FakeVllm, fake_vllm
from probe_text import probe_text
from sidecar_process import SidecarProcess, sidecar_process
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.calibration import Calibration, ConcurrencyFit
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import parse
from specdec_exporter.core.probe_parse import parse_probe
from specdec_exporter.sidecar.poller import Poller
from specdec_exporter.sidecar.scraper import Scrape
from variants import MODEL

SPEC_FAMILIES = (
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
)


def vllm_text(drafts: float, draft_tokens: float, accepted: float, k: int = 4) -> str:
    """vLLM's spec-decode families for one engine of MODEL, with literal counts."""
    labels = f'engine="0",model_name="{MODEL}"'
    lines = []
    for family, value in zip(SPEC_FAMILIES, (drafts, draft_tokens, accepted), strict=True):
        lines += [f"# TYPE vllm:{family}_total counter", f"vllm:{family}_total{{{labels}}} {value}"]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    for position in range(k):
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{position}"}}'
            f" {accepted / k}"
        )
    return "\n".join(lines) + "\n"


DRAFTS_WITHOUT_DRAFT_TOKENS = (
    vllm_text(10, 40, 20),
    # Structured output: every draft token of the window invalidated by the grammar, and vLLM's
    # observe_draft still counted the drafts (vllm-facts.md section 9).
    vllm_text(15, 40, 20),
)


def polled(fake: FakeVllm, times: int, process: SidecarProcess, timeout: float = 30) -> None:
    """Wait until the sidecar has asked ``fake`` for /metrics ``times`` times, or has exited."""
    deadline = time.monotonic() + timeout
    start = fake.requests
    while fake.requests < start + times and process.process.poll() is None:
        assert time.monotonic() < deadline, f"only {fake.requests - start} polls"
        time.sleep(0.05)


def assert_still_serving(process: SidecarProcess, *, tap: bool) -> None:
    assert process.process.poll() is None, process.records[-5:]
    assert not [r for r in process.records if "exiting" in str(r.get("msg"))]
    base = f"http://{process.address('metrics')}"
    assert httpx.get(f"{base}/metrics", timeout=10).status_code == 200
    report = httpx.get(f"{base}/api/report", timeout=10)
    assert report.status_code == 200, report.text[:500]
    if tap:  # the tap still forwards to vLLM
        forwarded = httpx.get(f"http://{process.address('tap')}/metrics", timeout=10)
        assert forwarded.status_code == 200 and "spec_decode" in forwarded.text


def run_against(
    bodies: tuple[str, ...], *extra: str, check: Callable[[SidecarProcess], None] | None = None
) -> None:
    with fake_vllm(bodies[0]) as fake, sidecar_process(fake.url, *extra) as process:
        process.address("metrics")
        fake.serve_in_turn(*bodies)
        polled(fake, len(bodies) + 3, process)
        assert_still_serving(process, tap="--proxy-listen" in extra)
        if check is not None:
            check(process)
        assert process.stop(timeout=15) == 0, process.records[-5:]


def test_a_window_of_drafts_without_draft_tokens_keeps_the_sidecar_and_its_tap_up() -> None:
    def no_figures_without_draft_tokens(process: SidecarProcess) -> None:
        report = httpx.get(f"http://{process.address('metrics')}/api/report", timeout=10).json()
        [row] = [e for e in report["entries"] if e["engine"] == "all"]
        assert row["drafts"] == 5.0 and row["draft_tokens"] == 0.0
        assert row["acceptance_rate"] is None and row["break_even_acceptance_rate"] is None
        assert row["verdict"] == "not drafting"

    run_against(
        DRAFTS_WITHOUT_DRAFT_TOKENS,
        "--proxy-listen",
        "127.0.0.1:0",
        check=no_figures_without_draft_tokens,
    )


def with_batch_bucket(text: str, label: str) -> str:
    return text.replace('batch_bucket="1"', f'batch_bucket="{label}"')


@pytest.mark.parametrize("label", ["²", "٣", "0+", "0", "9" * 10_000, ""])
def test_a_probe_batch_bucket_label_that_is_no_size_keeps_the_sidecar_up(
    label: str, tmp_path: Path
) -> None:
    calibration = Calibration(
        model_name=MODEL,
        draft_cost_ratio=0.1,
        concurrency_fits=[
            ConcurrencyFit(concurrency=1, draft_cost_ratio=0.1, break_even_acceptance_rate=0.1)
        ],
    )
    path = tmp_path / "calibration.json"
    path.write_text(calibration.model_dump_json())
    bodies = tuple(
        with_batch_bucket(
            vllm_text(10 * rounds, 40 * rounds, 20 * rounds) + probe_text(rounds=rounds), label
        )
        for rounds in (1, 2, 3)
    )
    run_against(bodies, "--calibration", str(path))


# The poll's one guard, in this process: a bug in the fold is one failed poll


class Scripted:
    def __init__(self, *bodies: str) -> None:
        self._bodies = list(bodies)

    async def scrape(self) -> Scrape:
        body = self._bodies.pop(0) if len(self._bodies) > 1 else self._bodies[0]
        return Scrape(parse(body), duration=0.01, probe=parse_probe(body))


@pytest.mark.anyio
async def test_an_exception_in_the_fold_is_an_internal_error_poll_and_the_next_poll_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    broken = {"now": True}

    def tap_counts(_state: object) -> dict[tuple[str, str], Totals]:
        if broken["now"]:
            raise ZeroDivisionError("planted")
        return {}

    bodies = [vllm_text(10 * n, 40 * n, 20 * n) for n in range(1, 4)]
    poller = Poller(
        Scripted(*bodies),
        interval=5,
        window=60,
        cost=DraftCost(0.1, "default"),
        log_interval=60,
        tap_counts=tap_counts,
    )
    for _ in range(3):
        await poller.poll_once()
    state = poller.state
    assert state.attempts == 3 and state.failures["internal"] == 3
    assert not state.up and state.report == [] and state.snapshot is None
    assert state.last_error is not None and state.last_error.detail.startswith(
        "internal error: ZeroDivisionError at test_fail_small.py:"
    )
    [line] = [r for r in caplog.records if r.levelno >= logging.WARNING]  # rate-limited: one
    assert line.getMessage() == "unexpected error while polling vLLM"
    assert vars(line)["error_type"] == "ZeroDivisionError"
    assert str(vars(line)["at"]).startswith("test_fail_small.py:")
    assert line.exc_info is not None
    broken["now"] = False
    await poller.poll_once()
    assert state.up and state.report and state.failures["internal"] == 3


# The supervisor, through the real `run`: each component made to fail in turn

INJECT_FAULT = Path(__file__).parent.parent / "inject_fault.py"
COMPONENTS = ("poller", "metrics_server", "tap")


def restarts_on(metrics_url: str) -> dict[str, float]:
    text = httpx.get(f"{metrics_url}/metrics", timeout=10).text
    return {
        sample.labels["component"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "specdec_component_restarts"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_failing_component_is_restarted_counted_and_the_tap_keeps_forwarding(
    component: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        sidecar_process_module, "SPECDEC", [sys.executable, str(INJECT_FAULT), component]
    )
    with (
        fake_vllm(vllm_text(10, 40, 20)) as fake,
        sidecar_process(fake.url, "--proxy-listen", "127.0.0.1:0") as process,
    ):
        failure = process.wait_for_record(
            lambda r: r.get("task") == component and "restarting" in str(r.get("msg"))
        )
        assert failure["msg"] == (
            f"{component} failed; restarting in 0.5 s: RuntimeError: injected fault in the "
            f"{component}"
        )
        assert f"injected fault in the {component}" in str(failure["traceback"])
        metrics_url = f"http://{process.address('metrics')}"
        assert restarts_on(metrics_url) == {name: float(name == component) for name in COMPONENTS}
        forwarded = httpx.get(f"http://{process.address('tap')}/metrics", timeout=10)
        assert forwarded.status_code == 200 and "spec_decode" in forwarded.text
        polled(fake, 2, process)  # the poller runs (again)
        assert_still_serving(process, tap=True)
        assert process.stop(timeout=15) == 0, process.records[-5:]


def test_counters_near_the_float_maximum_that_reset_every_poll_keep_api_report_answering() -> None:
    """Their reset-corrected running total overflows to inf: /api/report answered 500 (JSON has
    no Inf) and every figure of that series was lost for good."""
    high, low = vllm_text(1.7e308, 1.7e308, 1e308), vllm_text(1e308, 1e308, 5e307)
    bodies = (high, low, high, low, high, low)

    def all_finite_or_null(process: SidecarProcess) -> None:
        answer = httpx.get(f"http://{process.address('metrics')}/api/report", timeout=10)
        assert "Infinity" not in answer.text and "NaN" not in answer.text

    run_against(bodies, check=all_finite_or_null)


# `check` over the same window, as a subprocess


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_check_over_a_window_of_drafts_without_draft_tokens_is_a_verdict_not_a_traceback(
    output: list[str],
) -> None:
    with fake_vllm(DRAFTS_WITHOUT_DRAFT_TOKENS[0]) as fake:
        fake.serve_in_turn(*DRAFTS_WITHOUT_DRAFT_TOKENS)
        result = subprocess.run(
            [
                *sidecar_process_module.SPECDEC,
                "check",
                "--vllm-url",
                fake.url,
                "--window",
                "0.1",
                *output,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 1, result.stderr  # verdict "not drafting"
    if output:
        entries = json.loads(result.stdout)["entries"]
        [row] = [entry for entry in entries if entry["engine"] == "all"]
        assert (row["drafts"], row["draft_tokens"]) == (5.0, 0.0)
        assert row["break_even_acceptance_rate"] is None and row["verdict"] == "not drafting"
    else:
        assert "not drafting" in result.stdout

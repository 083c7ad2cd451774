"""The live page in a real headless Chromium during a demo-like run (simulator, sidecar with the
tap, mixed-temperature load, drafter degraded halfway, then vLLM refusing connections): the charts
and colours render, and each page explains itself. Screenshots of the healthy, degraded and
vLLM-down pages are kept as artifacts, and of a page whose engine probe has its temperature split
off (vLLM without --per-request-spec-decode-metrics), which says why where the split would be."""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pngdecode import count, decode

from sidecar_process import address_of, sidecar
from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.runner import run_load
from specdec_exporter.devtools.sim.probe import SPLIT_OFF_WITHOUT_METRICS
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, SpeculativeConfig
from specdec_exporter.sidecar.charts import BUCKET_COLOURS, MODEL_COLOUR
from specdec_exporter.sidecar.sections import NO_LOAD_LEVELS

pytestmark = pytest.mark.anyio
DEMO_MIX = "0:0.5,0.4:0.3,0.8:0.2"
VERDICT_DISABLE_BACKGROUND = "#fbd5d2"
STATUS_UP_BACKGROUND = "#d9f2e1"
WINDOW_SIZE = (1200, 2000)
GRAFANA = "https://grafana.example/d/vllm-specdec/vllm-speculative-decoding"
Report = dict[str, Any]


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        message = "chromium is not installed (Debian: apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI installs it in .ci/run")
        pytest.skip(message)
    return path


def artifacts_dir(tmp_path: Path) -> Path:
    """``$SPECDEC_TEST_ARTIFACTS`` (CI keeps it), else ``live-page/`` under the test's tmp_path."""
    directory = Path(os.environ.get("SPECDEC_TEST_ARTIFACTS") or tmp_path / "live-page")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


async def chromium(binary: str, profile: Path, *args: str) -> bytes:
    """Run headless Chromium without blocking the event loop (the load keeps running)."""
    process = await asyncio.create_subprocess_exec(
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--hide-scrollbars",
        f"--window-size={WINDOW_SIZE[0]},{WINDOW_SIZE[1]}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, stderr.decode()[-2000:]
    return stdout


async def until(
    client: httpx.AsyncClient,
    url: str,
    check: Callable[[Report], bool],
    what: str,
    deadline: float = 60,
) -> Report:
    """Poll /api/report until ``check`` holds (no fixed sleeps)."""
    give_up = time.monotonic() + deadline
    while True:
        report: Report = (await client.get(f"{url}/api/report")).json()
        if check(report):
            return report
        assert time.monotonic() < give_up, f"timed out waiting for {what}: {report}"
        await asyncio.sleep(0.1)


def model_row(report: Report) -> Report | None:
    return next((e for e in report["entries"] if e["engine"] == "all"), None)


def bucket_row(report: Report, bucket: str) -> Report | None:
    return next((b for b in report["buckets"] if b["temperature_bucket"] == bucket), None)


def good_for_a_while(report: Report) -> bool:
    model, greedy = model_row(report), bucket_row(report, "0")
    return (
        model is not None
        and (model["acceptance_rate"] or 0) > 0.6
        and greedy is not None
        and (greedy["acceptance_rate"] or 0) > 0.6
    )


def degraded(report: Report) -> bool:
    model, greedy = model_row(report), bucket_row(report, "0")
    return (
        model is not None
        and model["verdict"] == "disable"
        and greedy is not None
        and greedy["verdict"] == "disable"
    )


def polyline_values(dom: str, kind: str, bucket: str) -> list[float]:
    """The acceptance values a series' polylines draw (y = 10 + 196 * (1 - value))."""
    group = re.search(rf'<g class="series {kind}" data-bucket="{re.escape(bucket)}">(.*?)</g>', dom)
    assert group, f"no {kind} series {bucket!r} in the rendered page"
    values = []
    for points in re.findall(r'<polyline [^>]*points="([^"]+)"', group.group(1)):
        values += [1 - (float(pair.split(",")[1]) - 10) / 196 for pair in points.split()]
    return values


def text_of(dom: str) -> str:
    """The page's text as a person reads it: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


async def snapshot(binary: str, tmp_path: Path, url: str, name: str) -> tuple[str, Path]:
    """The rendered DOM and a screenshot of the page, both kept as artifacts."""
    artifacts = artifacts_dir(tmp_path)
    dom = (await chromium(binary, tmp_path / f"{name}-dom", "--dump-dom", url)).decode()
    screenshot = artifacts / f"live-page-{name}.png"
    await chromium(binary, tmp_path / f"{name}-shot", f"--screenshot={screenshot}", url)
    (artifacts / f"live-page-{name}.html").write_text(dom)
    print(f"\nscreenshot of the {name} live page: {screenshot}")
    return dom, screenshot


def check_explained(dom: str) -> str:
    """What every page with figures explains: the basis of each verdict, the charts' UTC axis,
    threshold and break-even lines, per-position acceptance, latency per bucket, load levels."""
    text = text_of(dom)
    why = "t 0.5 · c = 0.1 (default of method draft_model) · k 4"
    assert text.count(why) == dom.count('<td class="verdict '), "a verdict without its basis"
    assert "why: " in text and "runbook: " in text
    assert '<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="100%"' in dom
    assert re.search(r'text-anchor="\w+">\d\d:\d\d(:\d\d)?</text>', dom), "no clock on the axis"
    assert "time in UTC" in text
    assert 'data-label="threshold t"' in dom and "threshold t 0.5" in text
    assert 'data-label="break-even"' in dom and "break-even 0.1" in text
    assert "Acceptance per draft position (sidecar window)" in text and "position 3" in text
    assert "Latency by temperature bucket (request tap, since start)" in text
    assert "TTFT P90 ms" in text and "TPOT P90 ms" in text
    assert NO_LOAD_LEVELS in text
    assert f'<a href="{GRAFANA}">Grafana dashboard</a>' in dom
    return text


async def test_live_page_healthy_degraded_and_down(tmp_path: Path) -> None:
    binary = chromium_path()
    config = SimConfig(
        speculative=SpeculativeConfig("draft_model", 4),
        per_request_spec_decode_metrics="summary",
        drafter_quality=0.97,
        seed=1,
    )
    with (
        running_simulator(config) as sim,
        sidecar(
            sim.url,
            "--proxy-listen",
            "127.0.0.1:0",
            "--window",
            "1",
            "--speculative-method",
            "draft_model",
            "--grafana-dashboard-url",
            GRAFANA,
        ) as (url, records),
    ):
        tap_url = f"http://{address_of(records, 'tap')}"
        load = asyncio.create_task(
            run_load(
                LoadConfig(
                    url=tap_url,
                    concurrency=4,
                    duration=300,
                    mix=parse_mix(DEMO_MIX),
                    stream_share=0.5,
                    max_tokens=48,
                    seed=1,
                )
            )
        )
        try:
            async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
                await until(client, url, good_for_a_while, "a good drafter's figures")
                good_since = time.monotonic()
                await until(
                    client,
                    url,
                    lambda r: time.monotonic() - good_since > 2 and good_for_a_while(r),
                    "two seconds of a good drafter",
                )
                healthy, _ = await snapshot(binary, tmp_path, url, "healthy")
                await client.post(f"{sim.url}/sim/drafter", json={"quality": 0.0})
                await until(client, url, degraded, "the degraded drafter's verdicts")
                dom, screenshot = await snapshot(binary, tmp_path, url, "degraded")
                load.cancel()
                await asyncio.gather(load, return_exceptions=True)
                await client.post(f"{sim.url}/sim/fault", json={"kind": "refuse", "seconds": 600})
                await until(client, url, lambda r: not r["up"], "the sidecar to see vLLM down")
                down, _ = await snapshot(binary, tmp_path, url, "vllm-down")
        finally:
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)

    healthy_text = check_explained(healthy)
    assert " · window 1 s · " in healthy_text
    assert '<span class="badge up" id="status">up</span>' in healthy
    assert "healthy" in healthy_text and "last scrape" in healthy_text
    assert "vllm-down" not in healthy

    degraded_text = check_explained(dom)
    assert "why: modelled speedup 0." in degraded_text  # below 1: the disable row's reason
    assert "#specdecodespeedupbelowone" in dom and "runbook: SpecDecodeSpeedupBelowOne" in dom

    down_text = text_of(down)
    assert '<span class="badge down" id="status">DOWN</span>' in down
    assert "vLLM is not answering" in down_text
    assert re.search(r"error connect: ", down_text), down_text[:600]
    assert re.search(r"last successful scrape \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(", down_text)
    assert re.search(r"failed polls in a row [1-9]", down_text)
    assert re.search(r"failures since start, by reason connect [1-9]\d*, timeout ", down_text)
    assert "runbook: SpecDecodeVLLMUnreachable" in down_text
    assert "no figures while vLLM does not answer" in down_text
    assert " · window 1 s · " in down_text and "window 0 s" not in down_text

    # the browser rendered the server's SVG: the model's line and one per bucket with traffic
    assert dom.count('<svg class="chart"') == 1
    model = polyline_values(dom, "model", "")
    assert max(model) > 0.6 and min(model) < 0.1, model  # good, then degraded
    for bucket in ("0", "0-0.5", "0.7-1.0"):
        assert len(polyline_values(dom, "bucket", bucket)) >= 5
    assert '<td class="verdict v-bad"><span>disable</span></td>' in dom
    assert '<span class="badge up" id="status">up</span>' in dom

    image = decode(screenshot.read_bytes())
    assert (image.width, image.height) == WINDOW_SIZE
    colours = image.colours()
    counts = {
        colour: count(colours, colour, tolerance=8)
        for colour in (
            VERDICT_DISABLE_BACKGROUND,
            STATUS_UP_BACKGROUND,
            MODEL_COLOUR,
            *BUCKET_COLOURS[:3],
        )
    }
    print(f"pixels per colour: {counts}")
    assert counts[VERDICT_DISABLE_BACKGROUND] > 500  # several red verdict pills
    assert counts[STATUS_UP_BACKGROUND] > 100
    assert counts[MODEL_COLOUR] > 300  # the thick model line (text is #1f2937, never black)
    assert all(counts[colour] > 100 for colour in BUCKET_COLOURS[:3])  # more than legend swatches


async def test_live_page_with_the_probes_temperature_split_off(tmp_path: Path) -> None:
    """The engine probe in a vLLM without --per-request-spec-decode-metrics: its temperature
    split is off, its load-level split on. The page says why where the split would be, and shows
    the load levels."""
    binary = chromium_path()
    config = SimConfig(
        speculative=SpeculativeConfig("draft_model", 4),
        per_request_spec_decode_metrics="none",
        drafter_quality=0.97,
        seed=1,
        probe=True,
    )
    with (
        running_simulator(config) as sim,
        sidecar(sim.url, "--window", "1", "--speculative-method", "draft_model") as (url, _),
    ):
        load = asyncio.create_task(
            run_load(
                LoadConfig(
                    url=sim.url,
                    concurrency=4,
                    duration=120,
                    mix=parse_mix(DEMO_MIX),
                    max_tokens=48,
                    seed=1,
                )
            )
        )
        try:
            async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
                await until(
                    client,
                    url,
                    lambda r: (
                        model_row(r) is not None
                        and any(b["steps"] for b in r["batch_buckets"])
                        and (r.get("engine_probe") or {}).get("temperature_split") == "off"
                    ),
                    "the probe's load levels, with its temperature split off",
                )
                dom, screenshot = await snapshot(binary, tmp_path, url, "split-off")
        finally:
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)

    text = text_of(dom)
    assert (
        "Acceptance by temperature bucket the engine probe inside vLLM reports: "
        f"{SPLIT_OFF_WITHOUT_METRICS}"
    ) in text
    assert text.index("the engine probe inside vLLM reports") > text.index(
        "Acceptance per draft position"
    )
    assert 'id="split-off"' in dom
    assert "Acceptance by load level (engine probe, sidecar window)" in text
    assert NO_LOAD_LEVELS not in text
    image = decode(screenshot.read_bytes())
    assert (image.width, image.height) == WINDOW_SIZE
    assert count(image.colours(), STATUS_UP_BACKGROUND, tolerance=8) > 100

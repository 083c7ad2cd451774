"""The live page in a real headless Chromium during a demo-like run (simulator, sidecar with the
tap, mixed-temperature load, drafter degraded halfway): the charts and the colours render."""

from __future__ import annotations

import asyncio
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
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, SpeculativeConfig
from specdec_exporter.sidecar.charts import BUCKET_COLOURS, MODEL_COLOUR

pytestmark = pytest.mark.anyio
DEMO_MIX = "0:0.5,0.4:0.3,0.8:0.2"
VERDICT_DISABLE_BACKGROUND = "#fbd5d2"
STATUS_UP_BACKGROUND = "#d9f2e1"
WINDOW_SIZE = (1200, 1200)
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
    directory = Path(os.environ.get("SPECDEC_TEST_ARTIFACTS") or tmp_path)
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
    """The acceptance values a series' polylines draw (y = 10 + 136 * (1 - value))."""
    group = re.search(rf'<g class="series {kind}" data-bucket="{re.escape(bucket)}">(.*?)</g>', dom)
    assert group, f"no {kind} series {bucket!r} in the rendered page"
    values = []
    for points in re.findall(r'<polyline [^>]*points="([^"]+)"', group.group(1)):
        values += [1 - (float(pair.split(",")[1]) - 10) / 136 for pair in points.split()]
    return values


async def test_live_page_renders_charts_and_verdict_colours(tmp_path: Path) -> None:
    binary = chromium_path()
    artifacts = artifacts_dir(tmp_path)
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
                await client.post(f"{sim.url}/sim/drafter", json={"quality": 0.0})
                await until(client, url, degraded, "the degraded drafter's verdicts")
                dom = (await chromium(binary, tmp_path / "dom-profile", "--dump-dom", url)).decode()
                screenshot = artifacts / "live-page.png"
                await chromium(binary, tmp_path / "shot-profile", f"--screenshot={screenshot}", url)
        finally:
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
    (artifacts / "live-page.html").write_text(dom)
    print(f"\nscreenshot of the live page: {screenshot}")

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

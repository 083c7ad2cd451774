"""/metrics size, render time and RSS of `run` with the tap on, before, during and after one vLLM
scrape shows 2,000 extra model names and one 100 KB name.

Run: .venv/bin/python benchmarks/cardinality.py [--src DIR]
`--src` runs another checkout's src/ (e.g. the code before the bound, from `git archive`) against
the same fake vLLM. The sidecar polls every second; SPECDEC_MODEL_EXPIRY=3 (ignored by code
without the setting).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakevllm import fake_vllm  # noqa: E402
from variants import MODEL, capture, with_models  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def measure(url: str, pid: int) -> tuple[int, int, float, float]:
    started = time.perf_counter()
    text = httpx.get(url, timeout=600).text
    seconds = time.perf_counter() - started
    lines = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return lines, len(text), seconds, rss_mib(pid)


def wait_for(url: str, done: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done(httpx.get(url, timeout=600).text):  # type: ignore[operator]
            return True
        time.sleep(0.5)
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    args = parser.parse_args()
    names = [f"m{index:04d}" for index in range(2000)] + ["x" * 100_000]
    flood = with_models(capture("t3"), names)
    env = {**os.environ, "PYTHONPATH": str(args.src), "SPECDEC_MODEL_EXPIRY": "3"}
    with fake_vllm(capture("t3")) as vllm:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specdec_exporter.cli",
                "run",
                "--vllm-url",
                vllm.url,
                "--listen",
                "127.0.0.1:0",
                "--proxy-listen",
                "127.0.0.1:0",
                "--interval",
                "1",
            ],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert process.stderr is not None
        address = ""
        while not address:
            record = json.loads(process.stderr.readline())
            if record.get("component") == "metrics":
                address = record["address"]
        threading.Thread(target=process.stderr.read, daemon=True).start()
        url = f"http://{address}/metrics"
        tap_series = f'specdec_request_drafts_total{{model_name="{MODEL}"'
        wait_for(url, lambda text: tap_series in text, 60)
        rows = [("before", *measure(url, process.pid))]
        vllm.serve(flood)
        wait_for(url, lambda text: 'model_name="m1999"' in text, 600)
        rows.append(("2,000 names shown", *measure(url, process.pid)))
        vllm.serve(capture("t3"))
        expired = wait_for(
            url, lambda text: 'specdec_request_drafts_total{model_name="m0000"' not in text, 60
        )
        rows.append(
            (
                "vLLM back to one model" + ("" if expired else " (60 s later)"),
                *measure(url, process.pid),
            )
        )
        process.terminate()
        process.wait()
    print(f"code: {args.src}")
    print("| state | /metrics series | bytes | GET /metrics s | RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    for state, lines, size, seconds, rss in rows:
        print(f"| {state} | {lines:,} | {size:,} | {seconds:.2f} | {rss:.1f} |")


if __name__ == "__main__":
    main()

"""Steady RSS of `specdec-exporter run` polling a vLLM /metrics page (16 engines) every 0.1 s.

Run: .venv/bin/python benchmarks/rss_run.py [--seconds 60]
Starts a fake vLLM on loopback serving a 16-engine exposition built from the real capture,
starts the sidecar against it, scrapes the sidecar's /metrics too, and samples VmRSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakevllm import fake_vllm
from variants import capture, with_engines


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    with fake_vllm(with_engines(capture("t3"), 16)) as vllm:
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
                "--interval",
                "0.1",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stderr is not None
        address = ""
        while not address:
            record = json.loads(process.stderr.readline())
            if record.get("component") == "metrics":
                address = record["address"]
        samples = []
        started = time.monotonic()
        while time.monotonic() - started < args.seconds:
            httpx.get(f"http://{address}/metrics")
            samples.append(rss_mib(process.pid))
            time.sleep(1)
        polls = vllm.requests
        process.terminate()
        process.wait()
        process.stderr.close()
    print(f"polls of vLLM: {polls} in {args.seconds:.0f} s (16-engine exposition, 0.1 s interval)")
    print(f"RSS MiB: first {samples[0]:.1f}, max {max(samples):.1f}, last {samples[-1]:.1f}")


if __name__ == "__main__":
    main()

"""calibrate's fitted c on wall-clock TPOTs against the c of the simulator's own step times.

Starts two `specdec-exporter simulate` processes (draft_model k=4, and plain decoding), then runs
`specdec-exporter calibrate` in a third process once per concurrency, with the client's TPOT
(wall clock, the default). Between runs it reads the spec simulator's ground truth, whose
decode-step times give the c its step-time model charged: (time with drafts / time without - 1)/k.
Prints one markdown row per concurrency. Example:

    .venv/bin/python benchmarks/calibrate_sim.py --concurrency 1,8,32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import httpx
from simulator_process import start_simulator

K = 4
SPEC_CONFIG = json.dumps({"method": "draft_model", "model": "draft", "num_speculative_tokens": K})
SIM_FLAGS = ["--enable-per-request-metrics", "--mean-output-tokens", "100000"]


def step_totals(url: str) -> tuple[float, float]:
    total = httpx.get(url + "/sim/ground-truth", timeout=10).json()["total"]
    return float(total["decode_step_ms"]), float(total["decode_step_plain_ms"])


def calibrate(spec: str, base: str, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "specdec_exporter.cli",
        "calibrate",
        "--spec-url",
        spec,
        "--base-url",
        base,
        "--concurrency",
        str(concurrency),
        "--temperatures",
        args.temperatures,
        "--max-tokens",
        str(args.max_tokens),
        "--requests",
        str(args.rounds * concurrency),
        "--tpot-source",
        args.tpot_source,
        "--json",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"calibrate failed: {result.stderr}")
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--temperatures", default="0,0.7,1.0")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=4, help="requests per phase / concurrency")
    parser.add_argument("--tpot-source", default="client", choices=["client", "server"])
    args = parser.parse_args()
    spec_process, spec = start_simulator([*SIM_FLAGS, "--speculative-config", SPEC_CONFIG])
    base_process, base = start_simulator(SIM_FLAGS)
    print(
        "| concurrency | running spec / base | server-side c | fitted c (wall clock) "
        "| fitted / server-side | per-temperature fitted c |"
    )
    print("|---:|---|---:|---:|---:|---|")
    try:
        for concurrency in (int(part) for part in args.concurrency.split(",")):
            before = step_totals(spec)
            document = calibrate(spec, base, concurrency, args)
            after = step_totals(spec)
            server_c = ((after[0] - before[0]) / (after[1] - before[1]) - 1) / K
            fit = document["concurrency_fits"][0]
            fitted = fit["draft_cost_ratio"]
            per_temperature = ", ".join(f"{p['draft_cost_ratio']:.3f}" for p in document["points"])
            print(
                f"| {concurrency} | {fit['num_requests_running_spec']:.1f} / "
                f"{fit['num_requests_running_base']:.1f} | {server_c:.3f} | {fitted:.3f} | "
                f"{fitted / server_c:.2f} | {per_temperature} |",
                flush=True,
            )
    finally:
        for process in (spec_process, base_process):
            process.terminate()
            process.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

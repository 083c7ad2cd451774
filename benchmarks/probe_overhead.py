"""What the engine probe costs vLLM: CPU per finished request and per step, and served throughput.

    .venv/bin/python benchmarks/probe_overhead.py hooks     # (a) in-process, real vLLM objects
    .venv/bin/python benchmarks/probe_overhead.py server    # (b) the real vLLM CPU server, pairs

(a) `hooks`: vLLM's own OutputProcessor (real vLLM 0.32.0 of the real-vLLM venv, its tokenizer of
the tiny local model) processes the outputs of the same simulated requests (batches of 8, 48
tokens each in speculative steps of 1-5 tokens, the per-request spec-decode metrics on the last
output), in rounds that alternate between vLLM's `_update_stats_from_finished` as shipped and
wrapped by the probe. Reported: vLLM's CPU per finished request and per step (process_outputs),
the probe's CPU per finished sequence (its wrapper's work, timed directly on the same request
states) and per step (`record()` with a real SchedulerStats), and each as a share of vLLM's.
Runs in the real-vLLM venv's Python with PYTHONPATH set to a fresh `install-probe` copy, exactly
as vLLM loads it (the script re-runs itself there).

(b) `server`: one real vLLM CPU server (scripts/real_vllm/server.py: draft_model, k=4) at a
time, started afresh for each measurement without or with the probe (PYTHONPATH=copy), in ABBA
order, `--rounds` times: a warm-up, then `--requests` completions at `--concurrency`, mixed
temperatures, `--max-tokens` each. (Two servers side by side differ by more than the probe
costs, so both conditions must run in the same placement.) Reported per round: requests/s and
output tokens/s of each, the API-server process's CPU seconds per request (/proc), and the
with/without ratio of each pair.
The probe's server must report `specdec_probe_info{temperature_split="on",batch_split="on"}`.

Both measure on whatever else runs on the machine: the figures in BENCHMARKS.md were taken with
about eight agents sharing two cores. For a quiet-machine figure: stop other vLLM servers and
test runs (`python scripts/real_vllm/server.py status`), check `uptime` shows a load near 0, then
run `hooks --rounds 21` and `server --rounds 6` and compare the medians and pair spreads.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "real_vllm"))
INNER = "_hooks-in-vllm"

K = 4
BATCH = 8
TOKENS = 48
TEMPERATURES = (None, 0.0, 0.3, 0.6, 0.8, 1.0, 1.3)


def install_probe(directory: Path) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from specdec_exporter.probe.install import install  # noqa: PLC0415

    install(directory)


# --- (a) in-process, inside the real-vLLM venv --------------------------------------------------


def spec_steps(rng: random.Random) -> list[int]:
    """Accepted draft tokens per step (0..K) until TOKENS tokens are out (each step emits j+1)."""
    steps, out = [], 0
    while out < TOKENS:
        accepted = min(rng.choice((0, 1, 1, 2, 3, 4)), TOKENS - out - 1)
        steps.append(accepted)
        out += accepted + 1
    return steps


def hooks_in_vllm(rounds: int, requests: int) -> None:
    from vllm.sampling_params import RequestOutputKind, SamplingParams  # noqa: PLC0415
    from vllm.tokenizers.registry import get_tokenizer  # noqa: PLC0415
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason  # noqa: PLC0415
    from vllm.v1.engine.output_processor import (  # noqa: PLC0415
        OutputProcessor,
        RequestOutputCollector,
    )
    from vllm.v1.metrics.stats import (  # noqa: PLC0415
        IterationStats,
        RequestSpecDecodeMetrics,
        SchedulerStats,
    )
    from vllm.v1.spec_decode.metrics import SpecDecodingStats  # noqa: PLC0415

    from specdec_exporter.probe import plugin  # noqa: PLC0415  (from PYTHONPATH: the copy)

    assert plugin.__file__ is not None and plugin.__file__.startswith(os.environ["PROBE_COPY"])
    import vllm  # noqa: PLC0415

    home = Path(os.environ["REAL_VLLM_HOME"])
    tokenizer = get_tokenizer(str(home / "models" / "target"))
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=K),
        observability_config=SimpleNamespace(per_request_spec_decode_metrics="summary"),
        model_config=SimpleNamespace(served_model_name=["tiny-llama"]),
    )
    logger = plugin.SpecdecProbeStatLogger(config, 0)
    state = logger.state
    assert state is not None and state.temperature_buckets is not None
    wrapped = OutputProcessor._update_stats_from_finished
    original = wrapped.__wrapped__
    rng = random.Random(20)
    vocab = [t for t in range(100, 5000)]

    def workload(tag: str) -> list[list[tuple[EngineCoreRequest, list[int], float | None]]]:
        batches = []
        for b in range(requests // BATCH):
            batch = []
            for i in range(BATCH):
                temperature = TEMPERATURES[(b * BATCH + i) % len(TEMPERATURES)]
                params = SamplingParams(
                    temperature=1.0 if temperature is None else temperature,
                    max_tokens=TOKENS,
                    output_kind=RequestOutputKind.DELTA,
                )
                request = EngineCoreRequest(
                    f"{tag}-{b}-{i}",
                    [rng.choice(vocab) for _ in range(24)],
                    None,
                    params,
                    None,
                    time.time(),
                    None,
                    None,
                    None,
                    external_req_id=f"{tag}-{b}-{i}",
                )
                batch.append((request, spec_steps(rng), temperature))
            batches.append(batch)
        return batches

    def run(batches: list[list[tuple[Any, list[int], float | None]]]) -> tuple[float, int, list]:
        """vLLM's processing of every output: (CPU seconds, steps, finished request states)."""
        processor = OutputProcessor(tokenizer, log_stats=True)
        finished_states = []
        cpu = 0.0
        steps = 0
        for batch in batches:
            for request, _, _ in batch:
                processor.add_request(
                    request, None, queue=RequestOutputCollector(RequestOutputKind.DELTA, "x")
                )
            states = {r.request_id: processor.request_states[r.request_id] for r, _, _ in batch}
            longest = max(len(s) for _, s, _ in batch)
            for step in range(longest):
                outputs = []
                for request, plan, _ in batch:
                    if step >= len(plan):
                        continue
                    tokens = [rng.choice(vocab) for _ in range(plan[step] + 1)]
                    last = step == len(plan) - 1
                    metrics = None
                    if last:
                        metrics = RequestSpecDecodeMetrics.new(K)
                        for accepted in plan:
                            metrics.observe(K, accepted)
                    outputs.append(
                        EngineCoreOutput(
                            request.request_id,
                            tokens,
                            finish_reason=FinishReason.LENGTH if last else None,
                            spec_decode_metrics=metrics,
                        )
                    )
                stats = IterationStats()
                start = time.process_time()
                processor.process_outputs(outputs, time.monotonic(), stats)
                cpu += time.process_time() - start
                steps += 1
            finished_states += states.values()
        return cpu, steps, finished_states

    def probe_per_sequence(states: list[Any]) -> float:
        """The wrapper's own work per finished sequence, timed on real request states, with
        the drain that counts them (a scrape's, with one API server)."""
        calls = [((s, FinishReason.LENGTH, None), {}) for s in states]
        start = time.process_time()
        for args, kwargs in calls:
            state.observe_finished(args, kwargs)
        state.drain()
        return (time.process_time() - start) / len(calls)

    def probe_per_step(n: int) -> float:
        stats = []
        for i in range(n):
            spec = SpecDecodingStats.new(K)
            for _ in range(BATCH):
                spec.observe_draft(K, rng.choice((0, 1, 2, 3, 4)))
            stats.append(SchedulerStats(num_running_reqs=1 + i % 40, spec_decoding_stats=spec))
        start = time.process_time()
        for item in stats:
            logger.record(item, None, None, 0)
        state.drain()
        return (time.process_time() - start) / n

    rows = []
    for index in range(rounds):
        order = ("vllm", "probe") if index % 2 == 0 else ("probe", "vllm")
        for condition in order:
            method = wrapped if condition == "probe" else original
            OutputProcessor._update_stats_from_finished = method
            cpu, steps, states = run(workload(f"{index}{condition}"))
            rows.append(
                {
                    "round": index,
                    "condition": condition,
                    "vllm_us_per_request": cpu / len(states) * 1e6,
                    "vllm_us_per_step": cpu / steps * 1e6,
                    "probe_us_per_sequence": probe_per_sequence(states) * 1e6,
                    "probe_us_per_step": probe_per_step(steps) * 1e6,
                }
            )
    OutputProcessor._update_stats_from_finished = wrapped
    print(json.dumps({"vllm_version": vllm.__version__, "rows": rows}))


def hooks(args: argparse.Namespace) -> None:
    from server import Layout  # noqa: PLC0415

    layout = Layout.default()
    with tempfile.TemporaryDirectory(prefix="specdec-probe-") as copy:
        install_probe(Path(copy))
        result = subprocess.run(
            [str(layout.python), __file__, INNER, str(args.rounds), str(args.requests)],
            env={
                **os.environ,
                "PYTHONPATH": copy,
                "PROBE_COPY": copy,
                "REAL_VLLM_HOME": str(layout.home),
                "VLLM_LOGGING_LEVEL": "WARNING",
            },
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise SystemExit(result.stderr[-3000:])
    data = json.loads(result.stdout.strip().splitlines()[-1])
    rows = data["rows"]

    def med(condition: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["condition"] == condition)

    print(f"vLLM {data['vllm_version']}, {args.rounds} rounds x {args.requests} requests")
    print("round  condition  vLLM us/request  vLLM us/step  probe us/seq  probe us/step")
    for r in rows:
        print(
            f"{r['round']:5}  {r['condition']:9}  {r['vllm_us_per_request']:15.1f}"
            f"  {r['vllm_us_per_step']:12.1f}  {r['probe_us_per_sequence']:12.2f}"
            f"  {r['probe_us_per_step']:13.2f}"
        )
    base_request, base_step = med("vllm", "vllm_us_per_request"), med("vllm", "vllm_us_per_step")
    wrapped_request = med("probe", "vllm_us_per_request")
    seq = statistics.median(r["probe_us_per_sequence"] for r in rows)
    step = statistics.median(r["probe_us_per_step"] for r in rows)
    print(
        f"median vLLM output processing: {base_request:.1f} us per finished request, "
        f"{base_step:.1f} us per step"
    )
    print(
        f"median with the wrapper installed: {wrapped_request:.1f} us per finished request "
        f"({(wrapped_request / base_request - 1) * 100:+.1f}%)"
    )
    print(
        f"probe, timed directly: {seq:.2f} us per finished sequence "
        f"({seq / base_request * 100:.2f}% of vLLM's), {step:.2f} us per step "
        f"({step / base_step * 100:.2f}% of vLLM's)"
    )


# --- (b) the real server ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def send_load(
    url: str,
    requests: int,
    concurrency: int,
    max_tokens: int,
    temperatures: Sequence[float | None] = TEMPERATURES,
) -> tuple[float, int]:
    """(wall seconds, completion tokens) of `requests` completions at `concurrency`, the i-th at
    `temperatures[i % len(temperatures)]` (None: no `temperature` in the body)."""
    bodies = []
    for i in range(requests):
        body: dict[str, Any] = {
            "model": "tiny-llama",
            "prompt": f"Request {i}: write about the number {i * 7919 % 1000}",
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
        temperature = temperatures[i % len(temperatures)]
        if temperature is not None:
            body["temperature"] = temperature
        bodies.append(json.dumps(body).encode())
    tokens = [0]
    lock = threading.Lock()
    pending = list(reversed(bodies))

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                body = pending.pop()
            request = urllib.request.Request(
                f"{url}/v1/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=300) as response:
                usage = json.loads(response.read())["usage"]
            with lock:
                tokens[0] += usage["completion_tokens"]

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, tokens[0]


def probe_info(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return next((line for line in text.splitlines() if line.startswith("specdec_probe_info")), "")


def server(args: argparse.Namespace) -> None:
    """One server at a time, restarted for each measurement with or without the probe's
    PYTHONPATH, so both conditions run in the same placement (two servers side by side differ by
    more than the probe costs: a 2026-11-26 run gave 1.20x for the probe's server in every pair)."""
    import server as real  # noqa: PLC0415

    layout = real.Layout.default()
    with tempfile.TemporaryDirectory(prefix="specdec-probe-") as copy:
        install_probe(Path(copy))
        results: list[dict[str, Any]] = []
        for index in range(args.rounds):
            order = ("without", "with") if index % 2 == 0 else ("with", "without")
            for condition in order:
                env = {"PYTHONPATH": copy} if condition == "with" else None
                s = real.start(layout, name="bench-probe", env=env)
                try:
                    info = probe_info(s.url)
                    on = 'temperature_split="on"' in info and 'batch_split="on"' in info
                    assert on == (condition == "with"), info
                    send_load(s.url, args.concurrency * 2, args.concurrency, args.max_tokens)
                    before = cpu_seconds(s.pid)
                    wall, tokens = send_load(
                        s.url, args.requests, args.concurrency, args.max_tokens
                    )
                    cpu = cpu_seconds(s.pid) - before
                finally:
                    s.stop()
                row = {
                    "round": index,
                    "condition": condition,
                    "req_per_s": args.requests / wall,
                    "tokens_per_s": tokens / wall,
                    "frontend_cpu_ms_per_request": cpu / args.requests * 1e3,
                }
                results.append(row)
                print(json.dumps(row), flush=True)
    report(results, args)


def report(results: Sequence[dict[str, Any]], args: argparse.Namespace) -> None:
    def of(index: int, condition: str, key: str) -> float:
        (value,) = [r[key] for r in results if r["round"] == index and r["condition"] == condition]
        return float(value)

    print(
        f"{args.rounds} rounds x {args.requests} requests at concurrency {args.concurrency}, "
        f"{args.max_tokens} tokens each"
    )
    print("round  tok/s without  tok/s with  ratio  frontend CPU ms/req without  with")
    ratios, cpu_ratios = [], []
    for index in range(args.rounds):
        without, with_ = of(index, "without", "tokens_per_s"), of(index, "with", "tokens_per_s")
        cw, cp = (
            of(index, "without", "frontend_cpu_ms_per_request"),
            of(index, "with", "frontend_cpu_ms_per_request"),
        )
        ratios.append(with_ / without)
        cpu_ratios.append(cp / cw)
        print(
            f"{index:5}  {without:13.1f}  {with_:10.1f}  {with_ / without:5.3f}"
            f"  {cw:27.2f}  {cp:5.2f}"
        )
    print(
        f"throughput with/without: median {statistics.median(ratios):.3f}, "
        f"range {min(ratios):.3f}-{max(ratios):.3f}"
    )
    print(
        f"front-end CPU per request with/without: median {statistics.median(cpu_ratios):.3f}, "
        f"range {min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [INNER]:
        hooks_in_vllm(int(argv[1]), int(argv[2]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    in_process = commands.add_parser("hooks", help="(a) CPU per request and per step, in-process")
    in_process.add_argument("--rounds", type=int, default=7)
    in_process.add_argument("--requests", type=int, default=400)
    served = commands.add_parser("server", help="(b) throughput with and without, ABBA pairs")
    served.add_argument("--rounds", type=int, default=4)
    served.add_argument("--requests", type=int, default=64)
    served.add_argument("--concurrency", type=int, default=8)
    served.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], None] = hooks if args.command == "hooks" else server
    run(args)


if __name__ == "__main__":
    main()

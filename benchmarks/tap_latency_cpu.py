"""Tap cost on loopback: added time to first token (P50/P99 at 1, 64 and 256 streams), CPU per
streamed chunk of the proxy process, and a normal request's latency with 10,000 idle keep-alive
connections open, for the tap against direct and three baselines measured in the same run: nginx
(the pass-through reference), the obvious Starlette+httpx proxy, and a uvloop TCP pipe that parses
nothing (the floor of any proxy written in Python).

    .venv/bin/python benchmarks/tap_latency_cpu.py            # full run, ~12 minutes
    .venv/bin/python benchmarks/tap_latency_cpu.py --quick    # smoke run, ~3 minutes
    .venv/bin/python benchmarks/tap_latency_cpu.py --tap-src DIR  # the tap from another src/

Each server runs in its own process: a paced raw-asyncio SSE upstream shaped like vLLM (one
~230-byte chunk per step), the tap (uvloop), nginx (1 worker, proxy_buffering off, upstream
keepalive; `apt-get install nginx`), Starlette `StreamingResponse` over httpx `aiter_raw` under
uvicorn (uvloop, httptools), the pipe (uvloop). The load client is another process, and so is
the holder of the idle connections. CPU comes from /proc/<pid>/stat; the proxy is pinned alone
on the last core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tap_common import (
    HERE,
    LoadResult,
    Nginx,
    chat_request,
    cpu_seconds,
    cpu_split,
    cpu_times,
    free_port,
    install_uvloop,
    open_fds,
    open_idle,
    raise_fd_limit,
    rss_bytes,
    run_load,
    serve_pipe,
    serve_starlette,
    serve_upstream,
    spawn,
    stop,
    tap_settings,
    wait_for_port,
)

SCRIPT = str(HERE.parent / "tap_latency_cpu.py")
KINDS = {
    "rewrite": chat_request(stream=True),  # the common client: no include_usage
    "passthrough": chat_request(stream=True, include_usage=True),
    "json": chat_request(stream=False),
}
TARGETS = ("direct", "tap", "nginx", "pipe", "starlette")
IDLE_TARGETS = ("tap", "nginx")
"""uvicorn (under Starlette) closes idle connections after its keep-alive timeout like the others
(75 s here), but it is the slow baseline; the idle comparison is the tap against nginx."""
IDLE_READY_TIMEOUT = 300.0


@dataclass(frozen=True)
class Scenario:
    target: str
    concurrency: int
    per_connection: int
    kind: str


def spawn_proxy(
    role: str,
    port: int,
    upstream_port: int,
    cpus: set[int] | None,
    src: Path | None = None,
) -> subprocess.Popen[bytes]:
    """One proxy of this script (``tap``, ``starlette``, ``pipe`` or ``parsing-pipe``) in its
    own process."""
    return spawn(
        SCRIPT, role, "--port", str(port), "--upstream-port", str(upstream_port), cpus=cpus, src=src
    )


def serve_tap(port: int, upstream_port: int) -> None:
    from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.sidecar.serve import freeze_startup_heap  # noqa: PLC0415
    from specdec_exporter.tap.proxy import run_tap  # noqa: PLC0415
    from specdec_exporter.tap.stats import RequestStats  # noqa: PLC0415

    install_uvloop()
    config = tap_settings(f"http://127.0.0.1:{upstream_port}", f"127.0.0.1:{port}")
    stats = RequestStats(TemperatureBuckets(), lambda _: 4)
    freeze_startup_heap()  # as serve() does
    asyncio.run(run_tap(config, stats, lambda: frozenset({"bench"})))


def load_once(
    port: int, concurrency: int, per_connection: int, kind: str, stagger: float
) -> dict[str, object]:
    install_uvloop()
    result = asyncio.run(run_load(port, concurrency, per_connection, KINDS[kind], stagger))
    return {**result.summary(), "ttft_ms": [round(ms, 3) for ms in result.ttft_ms]}


def hold_idle(port: int, connections: int) -> None:
    """Open the idle connections, say so on stdout, hold them until stdin closes."""
    raise_fd_limit()
    install_uvloop()

    async def hold() -> None:
        transports = await open_idle(port, connections, KINDS["json"])
        print(json.dumps({"connections": len(transports)}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(hold())


def measure(
    scenario: Scenario,
    port: int,
    pids: list[int],
    shape: list[str],
    samples: list[float] | None = None,
) -> dict[str, float]:
    """Run the load in its own process; the target's CPU is read around it. Each request's
    latency is added to ``samples`` when given (the pooled idle comparison)."""
    warm = [
        "load",
        "--port",
        str(port),
        "--concurrency",
        str(scenario.concurrency),
        "--per-connection",
        "1",
        "--kind",
        scenario.kind,
        *shape,
    ]
    subprocess.run([sys.executable, SCRIPT, *warm], check=True, capture_output=True)
    user_before, system_before = cpu_times(pids)
    args = [
        "load",
        "--port",
        str(port),
        "--concurrency",
        str(scenario.concurrency),
        "--per-connection",
        str(scenario.per_connection),
        "--kind",
        scenario.kind,
        *shape,
    ]
    output = subprocess.run(
        [sys.executable, SCRIPT, *args], check=True, capture_output=True, text=True
    ).stdout
    user_after, system_after = cpu_times(pids)
    user, used = user_after - user_before, user_after + system_after - user_before - system_before
    result: dict[str, Any] = json.loads(output)
    latencies = result.pop("ttft_ms")
    if samples is not None:
        samples.extend(latencies)
    events = max(1, int(result["events"]))
    result["cpu_seconds"] = round(used, 3)
    result["cpu_us_per_chunk"] = round(used / events * 1e6, 2)
    result["user_us_per_chunk"] = round(user / events * 1e6, 2)  # the proxy's own code
    result["chunks_per_second"] = round(events / result["seconds"], 1)
    return result


GOAL_PAIRS = (
    ("direct", "rewrite"),
    ("tap", "rewrite"),
    ("nginx", "rewrite"),
    ("pipe", "rewrite"),
    ("tap", "passthrough"),
    ("nginx", "passthrough"),
    ("pipe", "passthrough"),
)
"""The 64-stream scenarios the goals are read from; ``--rounds`` repeats them, interleaved."""


def per_connection(quick: bool) -> tuple[int, int, int]:
    """Requests per connection at 1, 64 and 256 streams."""
    return (15, 6, 3) if quick else (60, 25, 8)


def scenarios(quick: bool) -> list[Scenario]:
    one, many, most = per_connection(quick)
    rows = []
    for target in TARGETS:  # Starlette last: its saturated 256-stream run must not precede others
        rows.append(Scenario(target, 1, one, "rewrite"))
        rows.append(Scenario(target, 64, many, "rewrite"))
        if target in ("tap", "nginx", "pipe"):
            rows.append(Scenario(target, 64, many, "passthrough"))
        rows.append(Scenario(target, 256, most, "rewrite"))
    return rows


IDLE_STREAM_CONCURRENCY = 4
"""Streams measured at once beside the idle connections: four light streams give more samples
in the same time than one at a time."""
IDLE_ROUNDS = 3
"""Rounds of the idle comparison, each measuring without and with the idle connections, in
alternating order; the latencies are pooled per condition. A single pass measured "with" always
after "without", and a 30 s window's P99 moves between 0.6 and 3.2 ms with nothing changed (the
streams' TTFT has a few 2-5 ms stalls in most windows, for nginx as for the tap), so one pass
read that drift as an effect of the idle connections."""


def idle_scenarios(target: str, quick: bool) -> list[Scenario]:
    streams_each, documents = (3, 200) if quick else (40, 400)
    return [
        Scenario(target, IDLE_STREAM_CONCURRENCY, streams_each, "rewrite"),
        Scenario(target, 1, documents, "json"),
    ]


def idle_comparison(
    target: str,
    port: int,
    pids: list[int],
    count: int,
    *,
    quick: bool,
    cpus: set[int] | None,
    shape: list[str],
) -> list[dict[str, object]]:
    """The target's latency without and with ``count`` idle connections: ``IDLE_ROUNDS``
    rounds in alternating order, one row per condition and request kind from the pooled
    latencies (``p99 per round`` keeps each round's own figure)."""
    work = idle_scenarios(target, quick)
    pooled: dict[tuple[int, str], LoadResult] = {}
    rounds_p99: dict[tuple[int, str], list[float]] = {}
    at_rest: dict[int, dict[str, float]] = {}
    for number in range(IDLE_ROUNDS):
        for idle in (0, count) if number % 2 == 0 else (count, 0):
            samples: list[list[float]] = [[] for _ in work]
            if idle:
                measured, at_rest[idle] = with_idle_connections(
                    port, pids, idle, cpus=cpus, work=work, shape=shape, samples=samples
                )
            else:
                measured = [
                    measure(scenario, port, pids, shape, into)
                    for scenario, into in zip(work, samples, strict=True)
                ]
                rss = sum(rss_bytes(pid) for pid in pids) / 2**20
                at_rest[idle] = {"rss_mib": round(rss, 1)}
            for scenario, result, latencies in zip(work, measured, samples, strict=True):
                key = (idle, scenario.kind)
                total = pooled.setdefault(key, LoadResult())
                total.ttft_ms.extend(latencies)
                total.requests += int(result["requests"])
                total.errors += int(result["errors"])
                rounds_p99.setdefault(key, []).append(result["ttft_p99_ms"])
                row = {"target": target, "idle": idle, "round": number + 1, **result}
                print(json.dumps(row), flush=True)
    rows: list[dict[str, object]] = []
    for (idle, kind), total in sorted(pooled.items(), key=lambda item: item[0][::-1]):
        summary = total.summary()
        rows.append(
            {
                "target": target,
                "idle": idle,
                "kind": kind,
                "requests": total.requests,
                "errors": total.errors,
                "ttft_p50_ms": summary["ttft_p50_ms"],
                "ttft_p99_ms": summary["ttft_p99_ms"],
                "p99_per_round": " ".join(f"{ms:.2f}" for ms in rounds_p99[(idle, kind)]),
                **at_rest[idle],
            }
        )
    return rows


def with_idle_connections(
    port: int,
    pids: list[int],
    count: int,
    *,
    cpus: set[int] | None,
    work: list[Scenario],
    shape: list[str],
    samples: list[list[float]],
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Open ``count`` idle connections in a holder process, measure ``work``, close them."""
    holder = subprocess.Popen(
        [sys.executable, SCRIPT, "idle", "--port", str(port), "--connections", str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if cpus:
            os.sched_setaffinity(holder.pid, cpus)
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], IDLE_READY_TIMEOUT)
        line = holder.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the idle connections were not opened ({holder.poll()})")
        rest_before = cpu_seconds(pids)
        time.sleep(5.0)  # a fixed window to measure the proxy's CPU at rest, not a wait
        at_rest = {
            "idle_connections": float(json.loads(line)["connections"]),
            "rest_cpu_ms_per_s": round((cpu_seconds(pids) - rest_before) / 5.0 * 1e3, 2),
            "rss_mib": round(sum(rss_bytes(pid) for pid in pids) / 2**20, 1),
        }
        results = [
            measure(scenario, port, pids, shape, into)
            for scenario, into in zip(work, samples, strict=True)
        ]
        at_rest["fds_after"] = float(open_fds(pids))  # still held: the idle timeout is 75 s
        return results, at_rest
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        stop(holder)  # type: ignore[arg-type]


def orchestrate(
    quick: bool,
    chunks: int,
    interval_ms: float,
    *,
    stagger: bool,
    pin: bool,
    idle: int,
    rounds: int = 1,
    tap_src: Path | None = None,
) -> None:
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if tap_src is not None:
        print(f"the tap runs the code in {tap_src}", flush=True)
    raise_fd_limit()  # inherited: the proxies hold the idle connections
    shape = ["--chunks", str(chunks), "--interval-ms", str(interval_ms)]
    if not stagger:
        shape.append("--no-stagger")
    proxy_cpus, load_cpus = cpu_split() if pin else (None, None)
    if load_cpus:
        os.sched_setaffinity(0, load_cpus)  # inherited by the load client processes
    upstream_port, tap_port, starlette_port = free_port(), free_port(), free_port()
    pipe_port = free_port()
    upstream = spawn(
        SCRIPT,
        "upstream",
        "--port",
        str(upstream_port),
        "--chunks",
        str(chunks),
        "--interval-ms",
        str(interval_ms),
        cpus=load_cpus,
    )
    tap = spawn_proxy("tap", tap_port, upstream_port, proxy_cpus, tap_src)
    starlette = spawn_proxy("starlette", starlette_port, upstream_port, proxy_cpus)
    pipe = spawn_proxy("pipe", pipe_port, upstream_port, proxy_cpus)
    nginx = None
    try:
        for port in (upstream_port, tap_port, starlette_port, pipe_port):
            wait_for_port(port)
        nginx = Nginx(upstream_port, proxy_cpus)
        targets = {
            "direct": (upstream_port, [upstream.pid]),
            "tap": (tap_port, [tap.pid]),
            "nginx": (nginx.port, nginx.pids()),
            "pipe": (pipe_port, [pipe.pid]),
            "starlette": (starlette_port, [starlette.pid]),
        }
        results = []
        for scenario in scenarios(quick):
            port, pids = targets[scenario.target]
            row = {
                "target": scenario.target,
                "streams": scenario.concurrency,
                "kind": scenario.kind,
                **measure(scenario, port, pids, shape),
            }
            results.append(row)
            print(json.dumps(row), flush=True)
        goal_rounds = [results]
        for number in range(2, rounds + 1):
            goal_rounds.append([])
            for target, kind in GOAL_PAIRS:
                port, pids = targets[target]
                scenario = Scenario(target, 64, per_connection(quick)[1], kind)
                row = {"target": target, "streams": 64, "kind": kind, "round": number}
                row.update(measure(scenario, port, pids, shape))
                goal_rounds[-1].append(row)
                print(json.dumps(row), flush=True)
        idle_results = []
        for target in IDLE_TARGETS if idle else ():
            port, pids = targets[target]
            idle_results += idle_comparison(
                target, port, pids, idle, quick=quick, cpus=load_cpus, shape=shape
            )
        print_table(results)
        print_idle_table(idle_results)
        print_goals(goal_rounds, idle_results)
    finally:
        if nginx is not None:
            nginx.stop()
        stop(starlette)
        stop(pipe)
        stop(tap)
        stop(upstream)
        print(f"load average at end: {os.getloadavg()}", flush=True)


def print_table(results: list[dict[str, object]]) -> None:
    from specdec_exporter.term import render_table  # noqa: PLC0415

    direct = {row["streams"]: row for row in results if row["target"] == "direct"}
    rows = []
    for row in results:
        base = direct[row["streams"]]
        added50 = float(row["ttft_p50_ms"]) - float(base["ttft_p50_ms"])  # type: ignore[arg-type]
        added99 = float(row["ttft_p99_ms"]) - float(base["ttft_p99_ms"])  # type: ignore[arg-type]
        cpu = None if row["target"] == "direct" else row["cpu_us_per_chunk"]
        user = None if row["target"] == "direct" else row.get("user_us_per_chunk")
        rows.append(
            [
                row["target"],
                row["kind"],
                row["streams"],
                row["requests"],
                row["errors"],
                row["ttft_p50_ms"],
                row["ttft_p99_ms"],
                round(added50, 3),
                round(added99, 3),
                row["chunks_per_second"],
                cpu,
                user,
            ]
        )
    print()
    print(
        render_table(
            [
                "target",
                "client",
                "streams",
                "requests",
                "errors",
                "ttft p50 ms",
                "ttft p99 ms",
                "added p50",
                "added p99",
                "chunks/s",
                "proxy cpu us/chunk",
                "of it user",
            ],
            rows,
        )
    )  # type: ignore[arg-type]


def print_idle_table(results: list[dict[str, object]]) -> None:
    from specdec_exporter.term import render_table  # noqa: PLC0415

    if not results:
        return
    rows = [
        [
            row["target"],
            row["kind"],
            row["idle"],
            row["requests"],
            row["errors"],
            row["ttft_p50_ms"],
            row["ttft_p99_ms"],
            row["p99_per_round"],
            row.get("rest_cpu_ms_per_s"),
            row.get("rss_mib"),
            row.get("fds_after"),
        ]
        for row in results
    ]
    print()
    print(
        render_table(
            [
                "target",
                "request",
                "idle conns",
                "requests",
                "errors",
                "latency p50 ms",
                "latency p99 ms",
                "p99 per round",
                "cpu at rest ms/s",
                "rss MiB",
                "fds after",
            ],
            rows,
        )
    )  # type: ignore[arg-type]


def print_goals(rounds: list[list[dict[str, object]]], idle: list[dict[str, object]]) -> None:
    """The issue's goals as ratios within this run: each 64-stream figure per round (the first
    round is the full table), and their median."""

    def row(rows: list[dict[str, object]], target: str, streams: int, kind: str) -> dict[str, Any]:
        return next(
            r for r in rows if (r["target"], r["streams"], r["kind"]) == (target, streams, kind)
        )

    def number(value: object) -> float:
        return float(value)  # type: ignore[arg-type]

    def cpu(rows: list[dict[str, object]], target: str, kind: str = "rewrite") -> float:
        return float(row(rows, target, 64, kind)["cpu_us_per_chunk"])

    def tap_over_nginx(kind: str) -> Callable[[list[dict[str, object]]], float]:
        return lambda rows: cpu(rows, "tap", kind) / cpu(rows, "nginx", kind)

    def over_pipe(target: str) -> Callable[[list[dict[str, object]]], float]:
        return lambda rows: cpu(rows, target) / cpu(rows, "pipe")

    def added_p99(kind: str) -> Callable[[list[dict[str, object]]], float]:
        def figure(rows: list[dict[str, object]]) -> float:
            through = row(rows, "tap", 64, kind)["ttft_p99_ms"]
            return float(through) - float(row(rows, "direct", 64, "rewrite")["ttft_p99_ms"])

        return figure

    def report(label: str, figure: Callable[[list[dict[str, object]]], float], unit: str) -> None:
        values = [figure(rows) for rows in rounds]
        each = ", ".join(f"{value:.2f}" for value in values)
        rounds_text = f" (rounds: {each})" if len(values) > 1 else ""
        print(f"{label}: {statistics.median(values):.3f}{unit}{rounds_text}")

    print()
    for kind in ("rewrite", "passthrough"):
        report(
            f"tap CPU per chunk / nginx, 64 streams, {kind} (goal <= 1.5x)",
            tap_over_nginx(kind),
            "x",
        )
    for target in ("tap", "nginx"):
        report(
            f"{target} CPU per chunk / a Python pipe (the floor), 64 streams",
            over_pipe(target),
            "x",
        )
    full = rounds[0]
    for streams in (64, 256):
        ratio = float(row(full, "starlette", streams, "rewrite")["cpu_us_per_chunk"]) / float(
            row(full, "tap", streams, "rewrite")["cpu_us_per_chunk"]
        )
        print(f"Starlette+httpx CPU per chunk / tap, {streams} streams: {ratio:.2f}x")
    for kind in ("rewrite", "passthrough"):
        label = f"tap added P99 TTFT, 64 streams, {kind} (goal < 1 ms, idle machine)"
        report(label, added_p99(kind), " ms")
    for target in sorted({str(r["target"]) for r in idle}):
        for kind in ("rewrite", "json"):
            pair = {r["idle"]: r for r in idle if (r["target"], r["kind"]) == (target, kind)}
            if len(pair) == 2:
                calm, crowded = (pair[key] for key in sorted(pair))
                for stat in ("ttft_p50_ms", "ttft_p99_ms"):
                    ratio = number(crowded[stat]) / number(calm[stat])
                    print(
                        f"{target} {kind} {stat.split('_')[1]} latency with "
                        f"{int(number(crowded['idle'])):,} idle connections / none: "
                        f"{ratio:.2f}x (goal <= 2x)"
                    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "role",
        nargs="?",
        default="run",
        choices=["run", "upstream", "tap", "pipe", "parsing-pipe", "starlette", "load", "idle"],
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the 64-stream goal scenarios, interleaved, this many times in all; the "
        "goals are then medians (each round ~100 s)",
    )
    parser.add_argument(
        "--tap-src",
        type=Path,
        help="run the tap from this src/ tree (another checkout, or a compiled copy)",
    )
    parser.add_argument("--port", type=int)
    parser.add_argument("--upstream-port", type=int)
    parser.add_argument("--chunks", type=int, default=50, help="content chunks per stream")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="pace between chunks")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--per-connection", type=int, default=10)
    parser.add_argument("--kind", choices=sorted(KINDS), default="rewrite")
    parser.add_argument(
        "--connections",
        type=int,
        default=10_000,
        help="idle keep-alive connections (0: skip the idle comparison)",
    )
    parser.add_argument(
        "--no-stagger",
        dest="stagger",
        action="store_false",
        help="start all streams at once (phase-aligned bursts)",
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="do not put the proxy alone on the last CPU",
    )
    args = parser.parse_args()
    if args.role == "upstream":
        install_uvloop()
        asyncio.run(serve_upstream(args.port, args.chunks, args.interval_ms / 1000))
    elif args.role == "tap":
        serve_tap(args.port, args.upstream_port)
    elif args.role == "pipe":
        serve_pipe(args.port, args.upstream_port)
    elif args.role == "parsing-pipe":
        serve_pipe(args.port, args.upstream_port, parse=True)
    elif args.role == "starlette":
        serve_starlette(args.port, args.upstream_port)
    elif args.role == "idle":
        hold_idle(args.port, args.connections)
    elif args.role == "load":
        stagger = (args.chunks + 2) * args.interval_ms / 1000 if args.stagger else 0.0
        print(
            json.dumps(
                load_once(args.port, args.concurrency, args.per_connection, args.kind, stagger)
            )
        )
    else:
        orchestrate(
            args.quick,
            args.chunks,
            args.interval_ms,
            stagger=args.stagger,
            pin=args.pin,
            idle=args.connections,
            rounds=args.rounds,
            tap_src=args.tap_src,
        )


if __name__ == "__main__":
    main()

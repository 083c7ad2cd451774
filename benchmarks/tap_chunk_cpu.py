"""CPU per streamed chunk of the tap's own code, without sockets: a ClientConnection and its
exchange fed vLLM-shaped SSE streams (one chunk per upstream read) through fake transports.

    .venv/bin/python benchmarks/tap_chunk_cpu.py                        # this checkout
    .venv/bin/python benchmarks/tap_chunk_cpu.py --baseline-src DIR     # and DIR, alternately
    .venv/bin/python benchmarks/tap_chunk_cpu.py --chunks 1             # mostly per-request cost
    .venv/bin/python benchmarks/tap_chunk_cpu.py --src A/src --baseline-src B/src  # two other trees

Each measurement runs in a child process. With ``--baseline-src`` (another checkout's src/,
e.g. from ``git archive``) the two codes alternate and the ratio of medians is printed, so a
change to the per-chunk path shows up without the loopback noise of tap_latency_cpu.py. Every
stream must end attributed, or the run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tap_common import (
    CONTENT_EVENT,
    DONE_EVENT,
    FINISH_EVENT,
    RESPONSE_HEAD,
    ROLE_EVENT,
    USAGE_EVENT,
    chat_request,
    frame,
    tap_settings,
)

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"rewrite": False, "passthrough": True}
"""Client without include_usage (the tap rewrites the stream) / with it (bytes verbatim)."""
CHUNKS = 50
"""Content chunks per stream by default (the role chunk, finish, usage and [DONE] come on top)."""


class FakeTransport:
    def __init__(self) -> None:
        self.written = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def upstream_reads(chunks: int) -> list[bytes]:
    """One stream as vLLM writes it: one event per chunk, one chunk per read."""
    events = [ROLE_EVENT, *[CONTENT_EVENT] * (chunks - 1), FINISH_EVENT, USAGE_EVENT, DONE_EVENT]
    reads = [frame(event) for event in events]
    reads[0] = RESPONSE_HEAD + reads[0]
    reads[-1] += b"0\r\n\r\n"
    return reads


def measure(kind: str, streams: int, chunks: int) -> dict[str, float]:
    from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.tap.proxy import ClientConnection, Tap  # noqa: PLC0415
    from specdec_exporter.tap.stats import RequestStats  # noqa: PLC0415
    from specdec_exporter.tap.upstream import UpstreamConnection  # noqa: PLC0415

    stats = RequestStats(TemperatureBuckets(), lambda _: 4)
    tap = Tap(tap_settings("http://vllm:8000", "127.0.0.1:0"), stats, lambda: frozenset({"bench"}))
    upstream = UpstreamConnection(tap.pool.release)  # the tap's own pool: works compiled too
    upstream.connection_made(FakeTransport())  # type: ignore[arg-type]
    tap.pool.release(upstream)  # idle: every stream takes it and gives it back (keep-alive)
    client = ClientConnection(tap)
    transport = FakeTransport()
    client.connection_made(transport)  # type: ignore[arg-type]
    request, reads = chat_request(stream=True, include_usage=KINDS[kind]), upstream_reads(chunks)

    def one_stream() -> None:
        client.data_received(request)
        for data in reads:
            upstream.data_received(data)

    for _ in range(streams // 10):  # warm-up
        one_stream()
    start = time.process_time()
    for _ in range(streams):
        one_stream()
    used = time.process_time() - start
    attributed = sum(row.attributed for row in stats.bucket_summary())
    assert attributed == streams + streams // 10 and not transport.closing, "a stream failed"
    assert not upstream.closed, "the upstream connection was not kept alive"
    return {"us_per_chunk": used / (streams * len(reads)) * 1e6}


def run(src: Path, kind: str, streams: int, chunks: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, __file__, "measure", "--kind", kind, "--streams", str(streams)]
    command += ["--chunks", str(chunks)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(output)
    return result["us_per_chunk"]


def compare(src: Path, baseline: Path | None, repeat: int, streams: int, chunks: int) -> None:
    measured = "this checkout" if src == ROOT / "src" else str(src)
    codes = {measured: src}
    if baseline is not None:
        codes["baseline"] = baseline
    for kind in KINDS:
        runs: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(repeat):
            for name, tree in codes.items():
                runs[name].append(run(tree, kind, streams, chunks))
        for name, values in runs.items():
            low, median, high = min(values), statistics.median(values), max(values)
            print(
                f"{kind:12} {name:14} CPU per chunk: median {median:.2f} µs "
                f"(min {low:.2f}, max {high:.2f}, {repeat} runs); "
                f"per stream of {chunks + 3} reads {median * (chunks + 3):.1f} µs"
            )
        if baseline is not None:
            ratio = statistics.median(runs[measured]) / statistics.median(runs["baseline"])
            print(f"{kind:12} {measured} / baseline: {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("role", nargs="?", default="run", choices=["run", "measure"])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the code measured")
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--kind", choices=sorted(KINDS), default="rewrite")
    parser.add_argument("--chunks", type=int, default=CHUNKS, help="content chunks per stream")
    args = parser.parse_args()
    if args.role == "measure":
        print(json.dumps(measure(args.kind, args.streams, args.chunks)))
    else:
        compare(args.src, args.baseline_src, args.repeat, args.streams, args.chunks)


if __name__ == "__main__":
    main()

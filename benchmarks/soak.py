"""Soak: N requests through a real tap (`specdec-exporter run --proxy-listen`) against the
simulator; the sidecar's RSS, open fds and exported series stay flat, and the tap counts every
request exactly.

    .venv/bin/python benchmarks/soak.py                           # 1,000,000 requests, 1-3 hours
    .venv/bin/python benchmarks/soak.py --requests 20000          # the CI size (tests/soak)

Loopback only. The simulator (`specdec-exporter simulate --speed 20`) and the sidecar are child
processes; this process is the clients. Traffic is a fixed mix, shuffled in decks of 100 so every
kind occurs in every 100 requests: streams with and without include_usage, non-streaming chat and
completions, several temperatures, client aborts mid-stream, 404s, 400s, n=2, bodies over the
inspection cap, GET /v1/models; and every --fault-every requests, a fifth into a batch, a fault:
a /sim/fault on /metrics (500, garbage, truncated, html, slow), vLLM refusing connections (502s),
or a vLLM restart (streams in flight end early, non-streaming requests get a 500, counters reset).
Every 1,000 requests the clients pause and the sidecar is sampled: VmRSS, /proc/PID/fd count, the
sample lines of its /metrics. Samples go to samples.csv, the judgement to summary.json, and the
last line printed is the verdict. "Flat" is defined in ``judge``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import csv
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httptools
import httpx
from prometheus_client.parser import text_string_to_metric_families

from specdec_exporter.core.buckets import INVALID_LABEL, UNKNOWN_LABEL, TemperatureBuckets
from specdec_exporter.tap.request import OTHER_MODEL

MIB = 1024 * 1024
SAMPLE_EVERY = 1_000
WARM_UP_SHARE = 0.10
RSS_SPREAD_LIMIT = 10 * MIB
"""After the warm-up, max - min of VmRSS over the samples (the goal: flat within 10 MB)."""
FD_FIXED_SLACK = 4
"""fds beyond one client and one pooled upstream connection per stream that may come and go
(the scraper's connection to vLLM is re-opened after a refused poll; a closing socket)."""
FD_END_SLACK = 1
"""Once the clients are gone and vLLM has closed the idle pooled connections, the fd count is
back to its pre-traffic value, give or take the scraper's connection."""
REQUEST_TIMEOUT = 60.0
SETTLE_TIMEOUT = 15.0

MODEL = "soak-model"
SPECULATIVE_CONFIG = '{"method": "ngram", "num_speculative_tokens": 4}'
INSPECT_CAP = 16_384
"""The sidecar's --proxy-inspect-max-bytes here: small, so one kind streams its body upstream."""
LONG_STREAM_TOKENS = 20_000
"""Aborted streams ask for this many tokens (ignore_eos): they cannot finish before the abort."""
TEMPERATURES = (0.0, 0.3, 0.6, 0.7, 0.9, 1.0, 1.3)
VLLM_DEFAULT_TEMPERATURE = 1.0
"""The simulator's (and vLLM's) temperature for a request without one; the tap's too, unset."""
FAULTS: tuple[tuple[str, dict[str, object]], ...] = (
    ("/sim/fault", {"kind": "500", "seconds": 1.0}),
    ("/sim/fault", {"kind": "garbage", "seconds": 1.0}),
    ("/sim/restart", {"downtime": 0.2}),  # streams in flight end early, counters restart at 0
    ("/sim/fault", {"kind": "truncated", "seconds": 1.0}),
    ("/sim/fault", {"kind": "html", "seconds": 1.0}),
    ("/sim/fault", {"kind": "slow", "seconds": 1.0, "delay": 0.6}),
    ("/sim/fault", {"kind": "refuse", "seconds": 0.2}),  # new connections refused: 502s
)
FAULT_AFTER = SAMPLE_EVERY // 5
"""Requests of a batch sent before its fault starts: counted, not timed, so that most of the batch
is still to run and the fault hits live streams however fast the machine runs the batch (a fixed
delay let a restart land after a quick batch had ended, with no stream to cut)."""
END_REFUSAL: dict[str, object] = {"kind": "refuse", "seconds": 0.1}
BUCKETS = TemperatureBuckets()


# ---------------------------------------------------------------- the traffic mix


@dataclass(frozen=True)
class Planned:
    """One request: its bytes, what the tap must count it as, and what the client does."""

    kind: str
    raw: bytes
    model_label: str | None  # None: not an inspected path, the tap counts nothing
    bucket: str
    attributable: bool  # a complete 200 answer means the tap saw the per-request metrics
    stream: bool = False
    client_usage: bool = False  # the client asked for include_usage itself
    abort: bool = False


def http_request(method: str, path: str, body: bytes | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: soak\r\nauthorization: Bearer sk-soak\r\n"
    if body is None:
        return (head + "\r\n").encode()
    return (
        head + f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


def post(
    kind: str,
    path: str,
    document: dict[str, object],
    *,
    model_label: str | None = MODEL,
    bucket: str | None = None,
    attributable: bool = True,
    abort: bool = False,
) -> Planned:
    temperature = document.get("temperature", VLLM_DEFAULT_TEMPERATURE)
    if bucket is None:
        assert isinstance(temperature, float)
        bucket = BUCKETS.label_for(temperature)
    options = document.get("stream_options")
    client_usage = isinstance(options, dict) and options.get("include_usage") is True
    body = json.dumps(document, separators=(",", ":")).encode()
    return Planned(
        kind,
        http_request("POST", path, body),
        model_label,
        bucket,
        attributable,
        stream=document.get("stream") is True,
        client_usage=client_usage,
        abort=abort,
    )


def chat(rng: random.Random, **extra: object) -> dict[str, object]:
    document: dict[str, object] = {
        "model": MODEL,
        "temperature": rng.choice(TEMPERATURES),
        "max_tokens": rng.randint(4, 24),
        "messages": [{"role": "user", "content": f"soak request {rng.randrange(10**6)}"}],
    }
    document.update(extra)
    return {key: value for key, value in document.items() if value is not None}


def completion(rng: random.Random, **extra: object) -> dict[str, object]:
    document = chat(rng, **extra)
    del document["messages"]
    document["prompt"] = f"soak prompt {rng.randrange(10**6)}"
    return document


CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
DONE = b"data: [DONE]\n\n"
USAGE = {"include_usage": True}

# kind -> (its share of every 100 requests, a builder)
MIX: dict[str, tuple[int, Callable[[random.Random], Planned]]] = {
    "chat stream (tap adds include_usage)": (
        28,
        lambda r: post("chat-stream", CHAT, chat(r, stream=True)),
    ),
    "chat stream, include_usage": (
        12,
        lambda r: post("chat-stream-usage", CHAT, chat(r, stream=True, stream_options=USAGE)),
    ),
    "chat stream, stream_options {}": (
        3,
        lambda r: post("chat-stream-options", CHAT, chat(r, stream=True, stream_options={})),
    ),
    "chat stream, no model, no temperature": (
        4,
        lambda r: post(
            "chat-stream-defaults", CHAT, chat(r, stream=True, model=None, temperature=None)
        ),
    ),
    "chat": (18, lambda r: post("chat", CHAT, chat(r))),
    "completions": (8, lambda r: post("completions", COMPLETIONS, completion(r))),
    "completions stream": (
        8,
        lambda r: post("completions-stream", COMPLETIONS, completion(r, stream=True)),
    ),
    "chat stream aborted by the client": (
        3,
        lambda r: post(
            "chat-abort",
            CHAT,
            chat(r, stream=True, max_tokens=LONG_STREAM_TOKENS, ignore_eos=True),
            attributable=False,
            abort=True,
        ),
    ),
    "completions stream, include_usage, aborted": (
        1,
        lambda r: post(
            "completions-abort",
            COMPLETIONS,
            completion(
                r, stream=True, stream_options=USAGE, max_tokens=LONG_STREAM_TOKENS, ignore_eos=True
            ),
            attributable=False,
            abort=True,
        ),
    ),
    "unknown model (404)": (
        2,
        lambda r: post(
            "unknown-model",
            CHAT,
            chat(r, model="not-served", temperature=0.7),
            model_label=OTHER_MODEL,
            attributable=False,
        ),
    ),
    "temperature a string (400, bucket invalid)": (
        1,
        lambda r: post(
            "invalid-temperature",
            CHAT,
            chat(r, temperature="hot"),
            bucket=INVALID_LABEL,
            attributable=False,
        ),
    ),
    "temperature 2.5 (400)": (
        1,
        lambda r: post("temperature-2.5", CHAT, chat(r, temperature=2.5), attributable=False),
    ),
    "n=2 (no per-request metrics)": (
        2,
        lambda r: post("n2", CHAT, chat(r, n=2, temperature=0.8), attributable=False),
    ),
    "body over the inspection cap": (
        1,
        lambda r: post(
            "over-cap",
            CHAT,
            chat(r, messages=[{"role": "user", "content": "x" * (INSPECT_CAP + 1)}]),
            bucket=UNKNOWN_LABEL,
            attributable=False,
        ),
    ),
    "GET /v1/models (not inspected)": (
        8,
        lambda r: Planned("models", http_request("GET", "/v1/models"), None, "", False),
    ),
}


def traffic(seed: int) -> Iterator[Planned]:
    """Endless requests: each deck of 100 holds every kind in its share, shuffled."""
    rng = random.Random(seed)
    deck = [builder for share, builder in MIX.values() for _ in range(share)]
    assert len(deck) == 100, len(deck)
    while True:
        rng.shuffle(deck)
        for builder in deck:
            yield builder(rng)


# ---------------------------------------------------------------- the clients


@dataclass
class Response:
    """httptools callbacks: status, body (dechunked) and whether the message completed."""

    parser: httptools.HttpResponseParser | None = None
    status: int = 0
    body: bytearray = field(default_factory=bytearray)
    events: int = 0
    complete: bool = False
    keep_alive: bool = False

    def on_headers_complete(self) -> None:
        assert self.parser is not None  # read here: the parser resets once the message is done
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, data: bytes) -> None:
        self.body += data
        self.events += data.count(b"data: ")

    def on_message_complete(self) -> None:
        self.complete = True


@dataclass
class Ledger:
    """What the clients sent and saw; ``expected`` is what the tap must have counted."""

    sent: int = 0
    inspected: int = 0
    expected: collections.Counter[tuple[str, str, str]] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    anomalies: collections.Counter[str] = field(default_factory=collections.Counter)


class Client:
    """One keep-alive connection to the tap, re-opened after an abort or a close."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self, plan: Planned) -> tuple[Response, str]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        response = Response()
        parser = httptools.HttpResponseParser(response)
        response.parser = parser
        self.writer.write(plan.raw)
        while not response.complete:
            data = await self.reader.read(65536)
            if not data:
                self.close()
                return response, "cut"
            parser.feed_data(data)
            if plan.abort and response.events >= 2 and not response.complete:
                self.abort()
                return response, "aborted"
        if not response.keep_alive:
            self.close()
        return response, "complete"

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def check_body(plan: Planned, response: Response) -> str | None:
    """What a client must see from a 200 (None if all is well)."""
    body = bytes(response.body)
    if plan.model_label is None:
        return None if body.startswith(b"{") else "models: not JSON"
    if plan.stream:
        if plan.client_usage != (b'"choices":[]' in body):
            return f"{plan.kind}: usage chunk {'missing' if plan.client_usage else 'leaked'}"
        if plan.client_usage and plan.attributable and b'"speculative_decoding"' not in body:
            return f"{plan.kind}: usage chunk without per-request metrics"
    elif plan.attributable and b'"speculative_decoding":{' not in body:
        return f"{plan.kind}: response without per-request metrics"
    return None


async def run_one(client: Client, plan: Planned, ledger: Ledger) -> None:
    ledger.sent += 1
    try:
        response, ending = await asyncio.wait_for(client.send(plan), REQUEST_TIMEOUT)
    except (TimeoutError, OSError, httptools.HttpParserError) as exc:
        client.abort()
        response, ending = Response(), f"error {exc.__class__.__name__}"
        ledger.anomalies[f"{plan.kind}: {ending}"] += 1
    if (
        ending == "complete"
        and response.status == 200
        and plan.stream
        and not response.body.endswith(DONE)
    ):
        ending = "ended early"  # vLLM restarted under it: no usage chunk, no [DONE]
    if plan.abort and response.status == 200 and ending == "complete":
        ledger.anomalies[f"{plan.kind}: not aborted ({ending}, {response.status})"] += 1
    ledger.outcomes[f"{plan.kind} {response.status or '-'} {ending}"] += 1
    if ending == "complete" and response.status == 200:
        problem = check_body(plan, response)
        if problem:
            ledger.anomalies[problem] += 1
    if plan.model_label is None:
        return
    ledger.inspected += 1
    attributed = plan.attributable and ending == "complete" and response.status == 200
    ledger.expected[(plan.model_label, plan.bucket, "true" if attributed else "false")] += 1


async def run_batch(
    clients: list[Client], plans: collections.deque[Planned], ledger: Ledger
) -> None:
    async def worker(client: Client) -> None:
        while plans:
            await run_one(client, plans.popleft(), ledger)

    await asyncio.gather(*(worker(client) for client in clients))


# ---------------------------------------------------------------- the processes


class Child:
    """A child process whose stderr is read by a thread; the last lines are kept for errors."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specdec_exporter.cli", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: collections.deque[str] = collections.deque(maxlen=40)
        self.counts: collections.Counter[str] = collections.Counter()
        self.found: dict[str, str] = {}
        self._patterns: dict[str, re.Pattern[str]] = {}
        self._event = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip())
            level = re.search(r'"level": ?"(\w+)"', line)
            self.counts[level.group(1) if level else "other"] += 1
            for key, pattern in self._patterns.items():
                match = pattern.search(line)
                if match and key not in self.found:
                    self.found[key] = match.group(1)
            self._event.set()

    def wait_for(self, patterns: dict[str, str], timeout: float = 30.0) -> dict[str, str]:
        """Wait until each regex (one group) has matched a stderr line; returns the groups."""
        self._patterns.update({key: re.compile(value) for key, value in patterns.items()})
        deadline = time.monotonic() + timeout
        while not all(key in self.found for key in patterns):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.process.args[3]} did not start: " + "\n".join(self.lines)
                )
            self._event.wait(0.1)
            self._event.clear()
        return {key: self.found[key] for key in patterns}

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._thread.join(5)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return code


@contextlib.contextmanager
def processes(speed: float, seed: int) -> Iterator[tuple[Child, str, Child, str, str]]:
    """(simulator, its URL, sidecar, its metrics URL, the tap's host:port)."""
    sim = Child(
        [
            "simulate",
            "--port",
            "0",
            "--served-model-name",
            MODEL,
            "--speculative-config",
            SPECULATIVE_CONFIG,
            "--per-request-spec-decode-metrics",
            "summary",
            "--speed",
            f"{speed:g}",
            "--mean-output-tokens",
            "16",
            "--max-model-len",
            str(2 * LONG_STREAM_TOKENS),
            "--seed",
            str(seed),
        ]
    )
    sidecar: Child | None = None
    try:
        sim_url = sim.wait_for({"url": r"at (http://127\.0\.0\.1:\d+)"})["url"]
        sidecar = Child(
            [
                "run",
                "--vllm-url",
                sim_url,
                "--listen",
                "127.0.0.1:0",
                "--proxy-listen",
                "127.0.0.1:0",
                "--interval",
                "0.5",
                "--scrape-timeout",
                "0.4",
                "--proxy-inspect-max-bytes",
                str(INSPECT_CAP),
            ]
        )
        found = sidecar.wait_for(
            {
                "metrics": r'"component": ?"metrics".*"address": ?"([\d.:]+)"',
                "tap": r'"component": ?"tap".*"address": ?"([\d.:]+)"',
            }
        )
        yield sim, sim_url, sidecar, f"http://{found['metrics']}", found["tap"]
    finally:
        if sidecar is not None:
            sidecar.stop()
        sim.stop()


# ---------------------------------------------------------------- samples and the verdict


@dataclass(frozen=True)
class Sample:
    requests: int
    seconds: float
    rss_bytes: int
    fds: int
    series: int
    up: int
    tap_requests: int
    load1: float


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass(frozen=True)
class Exposition:
    series: int
    up: int
    requests: dict[tuple[str, str, str], int]


def read_exposition(text: str) -> Exposition:
    """Sample lines, ``specdec_up`` and ``specdec_requests_total`` per label set."""
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    up, requests = -1, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "specdec_up":
                up = int(sample.value)
            elif sample.name == "specdec_requests_total":
                labels = sample.labels
                key = (labels["model_name"], labels["temperature_bucket"], labels["attributed"])
                requests[key] = int(sample.value)
    return Exposition(series, up, requests)


async def scrape(metrics_url: str) -> Exposition:
    # a new connection each time, closed after: our own socket never counts in the fds
    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(f"{metrics_url}/metrics", headers={"connection": "close"})
    response.raise_for_status()
    return read_exposition(response.text)


async def take_sample(pid: int, metrics_url: str, requests: int, started: float) -> Sample:
    fds, rss = open_fds(pid), rss_bytes(pid)  # read before our scrape opens a connection
    exposition = await scrape(metrics_url)
    return Sample(
        requests,
        round(time.monotonic() - started, 3),
        rss,
        fds,
        exposition.series,
        exposition.up,
        sum(exposition.requests.values()),
        os.getloadavg()[0],
    )


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def judge(
    samples: list[Sample], *, baseline_fds: int, end_fds: int, end_series: int, concurrency: int
) -> list[Check]:
    """Flat, precisely. The first 10 % of the samples (at least one) are the warm-up. After it:

    - RSS: max - min <= 10 MiB;
    - fds: never above the pre-traffic count + 2 * concurrency + 4 (one client and one pooled
      upstream connection per stream, plus the scraper's re-opened connection and slack), so a
      leak of a few fds over the whole soak shows; and at the end, with the clients gone and
      vLLM's side of the idle upstream connections closed, back to the pre-traffic count + 1;
    - series: no sample has more lines than the warm-up's largest, and the end (vLLM healthy)
      has exactly as many: labels are bounded and every label the mix uses is born in the
      warm-up (samples during a /metrics fault may have fewer: vLLM's figures are dropped).
    """
    if len(samples) < 2:
        return [Check("samples", False, f"{len(samples)} samples: at least 2 are needed")]
    warm = max(1, math.ceil(len(samples) * WARM_UP_SHARE))
    steady = samples[warm:]
    rss = [sample.rss_bytes for sample in steady]
    spread = max(rss) - min(rss)
    checks = [
        Check(
            "rss",
            spread <= RSS_SPREAD_LIMIT,
            f"RSS {min(rss) / MIB:.1f}-{max(rss) / MIB:.1f} MiB after the warm-up, "
            f"spread {spread / MIB:.2f} MiB (limit {RSS_SPREAD_LIMIT / MIB:.0f} MiB)",
        )
    ]
    fds = [sample.fds for sample in steady]
    ceiling_fds = baseline_fds + 2 * concurrency + FD_FIXED_SLACK
    checks.append(
        Check(
            "fds",
            max(fds) <= ceiling_fds,
            f"fds {min(fds)}-{max(fds)} after the warm-up (limit {ceiling_fds})",
        )
    )
    checks.append(
        Check(
            "fds at the end",
            end_fds - baseline_fds <= FD_END_SLACK,
            f"fds {baseline_fds} before traffic, {end_fds} after (limit +{FD_END_SLACK})",
        )
    )
    ceiling = max(sample.series for sample in samples[:warm])
    highest = max(sample.series for sample in steady)
    checks.append(
        Check(
            "series",
            highest <= ceiling and end_series == ceiling,
            f"series at most {ceiling} in the warm-up, at most {highest} after, "
            f"{end_series} at the end",
        )
    )
    return checks


def count_check(ledger: Ledger, counted: dict[tuple[str, str, str], int]) -> Check:
    """The tap's specdec_requests_total equals what the clients sent, per label set, exactly."""
    expected = {key: value for key, value in ledger.expected.items() if value}
    got = {key: value for key, value in counted.items() if value}
    total = sum(got.values())
    if got == expected:
        return Check(
            "counts",
            True,
            f"tap counted {total:,} = {ledger.inspected:,} inspected "
            f"requests sent (exact, in {len(expected)} label sets)",
        )
    differences = {
        "/".join(key): (expected.get(key, 0), got.get(key, 0))
        for key in sorted(expected.keys() | got.keys())
        if expected.get(key, 0) != got.get(key, 0)
    }
    return Check(
        "counts",
        False,
        f"tap counted {total:,}, sent {ledger.inspected:,}; "
        f"(sent, counted) per label set differing: {differences}",
    )


# ---------------------------------------------------------------- the run


@dataclass
class SoakResult:
    requests: int
    target: int
    seconds: float
    samples: list[Sample]
    checks: list[Check]
    ledger: Ledger
    faults: int
    sidecar_exit: int
    sidecar_log_levels: dict[str, int]
    cpu_seconds: dict[str, float]

    @property
    def passed(self) -> bool:
        return all(check.ok for check in self.checks)

    def verdict(self) -> str:
        failed = [check.name for check in self.checks if not check.ok]
        head = "PASS" if self.passed else f"FAIL ({', '.join(failed)})"
        rate = self.requests / self.seconds if self.seconds else 0.0
        return (
            f"soak {head}: {self.requests:,} of {self.target:,} requests in "
            f"{self.seconds / 60:.1f} min ({rate:.0f}/s), {self.faults} faults; "
            + "; ".join(check.detail for check in self.checks)
        )


@dataclass
class Driven:
    """What ``soak`` saw: samples (pre-traffic first, settled end last) and the end state."""

    samples: list[Sample]
    ledger: Ledger
    baseline_fds: int
    end_fds: int
    end_series: int
    counted: dict[tuple[str, str, str], int]
    faults: int
    seconds: float
    cpu: dict[str, float]


async def settle(condition: Callable[[], Awaitable[bool]], timeout: float = SETTLE_TIMEOUT) -> None:
    """Poll an async predicate until it holds or the deadline passes (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.05)


async def control_after(
    ledger: Ledger, sent: int, sim_url: str, path: str, document: dict[str, object]
) -> None:
    """``control`` once ``sent`` requests have gone out."""
    while ledger.sent < sent:
        await asyncio.sleep(0.005)
    await control(sim_url, path, document)


async def control(sim_url: str, path: str, document: dict[str, object]) -> None:
    """POST to the simulator's control API; retried while it refuses connections."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        try:
            async with httpx.AsyncClient(trust_env=False) as http:
                (await http.post(f"{sim_url}{path}", json=document)).raise_for_status()
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def soak(
    requests: int,
    *,
    concurrency: int,
    fault_every: int,
    max_seconds: float,
    seed: int,
    pid: int,
    sim_pid: int,
    sim_url: str,
    metrics_url: str,
    tap: str,
    progress: bool,
) -> Driven:
    """Drive the traffic, sampling every 1,000 requests; then let the sidecar settle."""

    async def model_known() -> bool:
        exposition = await scrape(metrics_url)
        return exposition.up == 1 and any(key[0] == MODEL for key in exposition.requests)

    await settle(model_known)
    started = time.monotonic()
    baseline = await take_sample(pid, metrics_url, 0, started)
    samples = [baseline]
    host, port = tap.rsplit(":", 1)
    clients = [Client(host, int(port)) for _ in range(concurrency)]
    plans, ledger, faults = traffic(seed), Ledger(), 0
    next_fault = fault_every // 2 if fault_every else requests + 1
    while ledger.sent < requests and time.monotonic() - started < max_seconds:
        fault = None
        batch = collections.deque(
            next(plans) for _ in range(min(SAMPLE_EVERY, requests - ledger.sent))
        )
        if ledger.sent >= next_fault:  # injected once the batch runs, so it hits live streams
            path, document = FAULTS[faults % len(FAULTS)]
            at = ledger.sent + min(FAULT_AFTER, len(batch) // 2)  # reached within this batch
            fault = asyncio.create_task(control_after(ledger, at, sim_url, path, document))
            faults += 1
            next_fault += fault_every
        await run_batch(clients, batch, ledger)
        if fault is not None:
            await fault
        samples.append(await take_sample(pid, metrics_url, ledger.sent, started))
        if progress and len(samples) % 10 == 1:
            print(json.dumps(asdict(samples[-1])), flush=True)
    elapsed = time.monotonic() - started
    for client in clients:
        client.close()
    # vLLM closes idle keep-alive connections after 5 s, the simulator after 30 s: a short
    # refusal closes them at once, and shows every socket the peer closed is released
    await control(sim_url, "/sim/fault", END_REFUSAL)

    end_fds, end = 0, Exposition(0, -1, {})  # what settled() last saw

    async def settled() -> bool:
        """One look at the end state: vLLM up again after the refusal, every inspected request
        counted, the sockets released. Judged on the very scrape that is kept: with separate
        waits the poller could see the refusal between them, and the end would be judged down."""
        nonlocal end_fds, end
        end_fds = open_fds(pid)  # before our scrape opens a connection
        end = await scrape(metrics_url)
        counted = sum(end.requests.values()) >= ledger.inspected
        return end.up == 1 and counted and end_fds <= baseline.fds + FD_END_SLACK

    await settle(settled)
    samples.append(
        Sample(
            ledger.sent,
            round(elapsed, 3),
            rss_bytes(pid),
            end_fds,
            end.series,
            end.up,
            sum(end.requests.values()),
            os.getloadavg()[0],
        )
    )
    cpu = {"sidecar": cpu_seconds(pid), "simulator": cpu_seconds(sim_pid)}
    return Driven(
        samples, ledger, baseline.fds, end_fds, end.series, end.requests, faults, elapsed, cpu
    )


def run_soak(
    requests: int,
    *,
    concurrency: int = 32,
    fault_every: int = 10_000,
    max_seconds: float = 6 * 3600,
    speed: float = 20.0,
    seed: int = 0,
    out: Path | None = None,
    progress: bool = False,
) -> SoakResult:
    import uvloop  # noqa: PLC0415

    with processes(speed, seed) as (sim, sim_url, sidecar, metrics_url, tap):
        run = uvloop.run(
            soak(
                requests,
                concurrency=concurrency,
                fault_every=fault_every,
                max_seconds=max_seconds,
                seed=seed,
                pid=sidecar.process.pid,
                sim_pid=sim.process.pid,
                sim_url=sim_url,
                metrics_url=metrics_url,
                tap=tap,
                progress=progress,
            )
        )
    code = sidecar.process.returncode
    # the first sample is before traffic, the last the settled end: flatness is judged between
    checks = judge(
        run.samples[1:-1],
        baseline_fds=run.baseline_fds,
        end_fds=run.end_fds,
        end_series=run.end_series,
        concurrency=concurrency,
    )
    checks.append(count_check(run.ledger, run.counted))
    anomalies = sum(run.ledger.anomalies.values())
    checks.append(
        Check(
            "anomalies",
            anomalies == 0,
            f"{anomalies} client-side anomalies {dict(run.ledger.anomalies)}",
        )
    )
    checks.append(Check("exit", code == 0, f"sidecar exit code {code} on SIGTERM"))
    result = SoakResult(
        run.ledger.sent,
        requests,
        run.seconds,
        run.samples,
        checks,
        run.ledger,
        run.faults,
        code,
        dict(sidecar.counts),
        run.cpu,
    )
    if out is not None:
        write_results(result, out)
    return result


def write_results(result: SoakResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "samples.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Sample.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(sample) for sample in result.samples)
    summary = {
        "verdict": result.verdict(),
        "passed": result.passed,
        "requests": result.requests,
        "target": result.target,
        "seconds": round(result.seconds, 1),
        "faults": result.faults,
        "checks": [asdict(check) for check in result.checks],
        "outcomes": dict(sorted(result.ledger.outcomes.items())),
        "sidecar_log_levels": result.sidecar_log_levels,
        "cpu_seconds": result.cpu_seconds,
        "cpu_us_per_request": {
            name: round(seconds / max(1, result.requests) * 1e6)
            for name, seconds in result.cpu_seconds.items()
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--fault-every",
        type=int,
        default=10_000,
        help="requests between two /sim/fault injections (0: none)",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=6 * 3600,
        help="stop sending after this long and judge what was done",
    )
    parser.add_argument("--speed", type=float, default=20.0, help="the simulator's --speed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("soak-results"))
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    result = run_soak(
        args.requests,
        concurrency=args.concurrency,
        fault_every=args.fault_every,
        max_seconds=args.max_seconds,
        speed=args.speed,
        seed=args.seed,
        out=args.out,
        progress=True,
    )
    print(f"samples: {args.out / 'samples.csv'}; summary: {args.out / 'summary.json'}")
    print(result.verdict())
    sys.exit(0 if result.passed else 1)


if __name__ == "__main__":
    main()

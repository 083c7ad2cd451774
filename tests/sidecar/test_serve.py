"""serve(): one supervisor for the poller, metrics server and tap; a failed component is restarted
with a backoff, never the end of the process; graceful drain.

The drain paths and the fault injection (tests/sidecar/test_fail_small.py) run through the real
`specdec-exporter run` command."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from sidecar_process import SPECDEC, SidecarProcess, sidecar_process
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import DEFAULT_MODEL, SimConfig
from specdec_exporter.logs import JsonFormatter
from specdec_exporter.sidecar.supervisor import Backoff, Supervisor

CLOSED_PORT_URL = "http://127.0.0.1:9"


# The supervisor, in this process


async def wait_forever() -> None:
    await asyncio.Event().wait()


QUICK = Backoff(first=0.001, most=0.004, steady=60)


class Flaky:
    """A component that fails (or returns) on its first ``failures`` runs, then serves."""

    def __init__(self, failures: int, *, raises: bool = True) -> None:
        self.failures = failures
        self.raises = raises
        self.runs = 0
        self.serving = asyncio.Event()

    async def run(self) -> None:
        self.runs += 1
        await asyncio.sleep(0)
        if self.runs <= self.failures:
            if self.raises:
                raise KeyError("model")
            return
        self.serving.set()
        await asyncio.Event().wait()


@pytest.mark.anyio
async def test_a_component_that_raises_is_restarted_with_a_backoff_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor(QUICK)
    tap, poller = Flaky(0), Flaky(3)
    supervisor.start("tap", tap.run)  # (its drain is tested below)
    supervisor.start("poller", poller.run)
    run = asyncio.create_task(supervisor.run())
    await poller.serving.wait()
    assert not run.done() and tap.runs == 1  # the tap never stopped
    assert supervisor.restarts == {"tap": 0, "poller": 3}
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    lines = [json.loads(JsonFormatter().format(r)) for r in errors]
    assert [line["msg"] for line in lines] == [
        "poller failed; restarting in 0.001 s: KeyError: 'model'",
        "poller failed; restarting in 0.002 s: KeyError: 'model'",
        "poller failed; restarting in 0.004 s: KeyError: 'model'",
    ]
    assert lines[0]["task"] == "poller" and lines[0]["error"] == "KeyError: 'model'"
    assert 'in run\n    raise KeyError("model")' in lines[0]["traceback"]
    supervisor.on_signal()
    assert await run == 0


@pytest.mark.anyio
async def test_a_component_that_returns_on_its_own_is_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor(QUICK)
    poller = Flaky(1, raises=False)
    supervisor.start("poller", poller.run)
    supervisor.start("metrics_server", wait_forever)
    run = asyncio.create_task(supervisor.run())
    await poller.serving.wait()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "poller stopped unexpectedly; restarting in 0.001 s"
    ]
    assert supervisor.restarts == {"poller": 1, "metrics_server": 0}
    supervisor.on_signal()
    assert await run == 0


def test_the_backoff_doubles_up_to_its_most_and_starts_again_after_a_steady_run() -> None:
    backoff = Backoff(first=0.5, most=30, steady=60)
    delays = [backoff.after(None, 0)]
    for _ in range(8):
        delays.append(backoff.after(delays[-1], 1))
    assert delays == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff.after(30, 61) == 0.5


class Drainer:
    """A tap stand-in: returns once draining is set and ``release`` is too."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.release = asyncio.Event()
        self.finished = False

    async def run(self) -> None:
        await self.supervisor.draining.wait()
        await self.release.wait()
        self.finished = True


@pytest.mark.anyio
async def test_first_signal_drains_while_the_rest_keeps_running_then_exit_0() -> None:
    supervisor = Supervisor()
    drainer = Drainer(supervisor)
    stopped: list[str] = []
    metrics_stop = asyncio.Event()

    async def metrics() -> None:
        await metrics_stop.wait()

    supervisor.start("tap", drainer.run, drains=True)
    supervisor.start(
        "metrics server",
        metrics,
        stop=lambda: (stopped.append("metrics server"), metrics_stop.set()),
    )
    run = asyncio.create_task(supervisor.run())
    await asyncio.sleep(0)
    supervisor.on_signal()
    for _ in range(20):  # draining: the metrics server is still up, nothing is stopped
        await asyncio.sleep(0)
    assert not run.done() and stopped == []
    drainer.release.set()
    assert await run == 0
    assert drainer.finished and stopped == ["metrics server"]


@pytest.mark.anyio
async def test_second_signal_exits_1_without_waiting_for_the_drain() -> None:
    supervisor = Supervisor()
    drainer = Drainer(supervisor)
    supervisor.start("tap", drainer.run, drains=True)
    supervisor.start("poller", wait_forever)
    run = asyncio.create_task(supervisor.run())
    await asyncio.sleep(0)
    supervisor.on_signal()
    supervisor.on_signal()
    assert await run == 1
    assert not drainer.finished


@pytest.mark.anyio
async def test_a_tap_that_fails_while_draining_is_a_failure() -> None:
    supervisor = Supervisor()

    async def failing_drain() -> None:
        await supervisor.draining.wait()
        raise OSError("boom")

    supervisor.start("tap", failing_drain, drains=True)
    supervisor.start("poller", wait_forever)
    run = asyncio.create_task(supervisor.run())
    await asyncio.sleep(0)
    supervisor.on_signal()
    assert await run == 1


# Start-up through the real `run` command


def test_start_up_objects_are_frozen_out_of_the_collectors_reach() -> None:
    """Else every full collection walks the app's ~56,000 start-up objects: a 20-30 ms pause of
    every stream the tap passes (sidecar/serve.freeze_startup_heap)."""
    with sidecar_process(CLOSED_PORT_URL, "--proxy-listen", "127.0.0.1:0") as process:
        starting = process.wait_for_record(lambda record: record.get("msg") == "starting")
    assert int(str(starting["heap_frozen_objects"])) > 20_000


# Start-up failures through the real `run` command


def run_until_exit(*flags: str) -> tuple[int, list[str]]:
    result = subprocess.run(
        [*SPECDEC, "run", "--vllm-url", CLOSED_PORT_URL, *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stderr.splitlines()


@contextmanager
def taken_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


@pytest.mark.parametrize("flag", ["--listen", "--proxy-listen"])
def test_a_port_in_use_is_one_readable_line_and_exit_64(flag: str) -> None:
    """Bound before anything serves or logs: one plain line naming the flag, not a JSON record."""
    with taken_port() as port:
        flags = {
            "--listen": "127.0.0.1:0",
            "--proxy-listen": "127.0.0.1:0",
            flag: f"127.0.0.1:{port}",
        }
        code, lines = run_until_exit(*(item for pair in flags.items() for item in pair))
    assert code == 64
    assert lines == [
        f"specdec-exporter run: cannot listen on 127.0.0.1:{port} ({flag}): address already in "
        f"use; stop what uses it, or give {flag} another address"
    ]


def test_missing_generation_config_is_a_config_error_before_serving(tmp_path: object) -> None:
    missing = f"{tmp_path}/nowhere/generation_config.json"
    code, lines = run_until_exit("--proxy-listen", "127.0.0.1:0", "--generation-config", missing)
    assert code == 64
    assert lines == [
        "specdec-exporter run: invalid setting: --generation-config (or "
        f"SPECDEC_GENERATION_CONFIG): cannot read generation config {missing}: "
        "No such file or directory"
    ]


def test_generation_config_that_is_not_json_is_a_config_error(tmp_path: object) -> None:
    path = f"{tmp_path}/generation_config.json"
    with open(path, "w") as file:
        file.write("{not json")
    code, lines = run_until_exit("--proxy-listen", "127.0.0.1:0", "--generation-config", path)
    assert code == 64
    [line] = lines
    assert line.startswith(
        "specdec-exporter run: invalid setting: --generation-config (or "
        f"SPECDEC_GENERATION_CONFIG): generation config {path} is not JSON: "
        "Expecting property name"
    )


# Graceful drain through the real `run` command, against the simulator


class RecordingRelay:
    """A TCP relay in front of the simulator that keeps every byte the simulator sent back,
    one buffer per connection: the reference the tap's output is compared with."""

    def __init__(self, target_url: str) -> None:
        host, _, port = target_url.removeprefix("http://").rpartition(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.replies: list[bytearray] = []
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            reply = bytearray()
            self.replies.append(reply)
            threading.Thread(target=_pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client, reply), daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for connection in self._sockets:
            connection.close()


def _pump(source: socket.socket, target: socket.socket, record: bytearray | None) -> None:
    try:
        while data := source.recv(65536):
            if record is not None:
                record += data
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Stream:
    """One streamed chat completion sent through the tap on a raw socket; keeps every byte."""

    def __init__(self, address: tuple[str, int], max_tokens: int) -> None:
        body = json.dumps(
            {
                "model": DEFAULT_MODEL,
                "max_tokens": max_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
                "temperature": 0.7,
                "messages": [{"role": "user", "content": "Tell me about drafts."}],
            }
        )
        self.request = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: tap\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            f"{body}"
        ).encode()
        self.received = bytearray()
        self.streaming = threading.Event()
        self.ended = threading.Event()
        self._socket = socket.create_connection(address, timeout=120)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            self._socket.sendall(self.request)
            while data := self._socket.recv(65536):
                self.received += data
                if b"data: " in self.received:
                    self.streaming.set()
        finally:
            self._socket.close()
            self.ended.set()

    @property
    def body(self) -> bytes:
        """The chunked body as it came through (framing included)."""
        return bytes(self.received.partition(b"\r\n\r\n")[2])

    @property
    def complete(self) -> bool:
        return self.received.startswith(b"HTTP/1.1 200") and self.body.endswith(b"\r\n0\r\n\r\n")


def wait_until(condition: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.02)


def refuses_connections(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@contextmanager
def slow_stack(*flags: str) -> Iterator[tuple[SidecarProcess, RecordingRelay, tuple[str, int]]]:
    """Simulator (one engine step ~90 ms) behind a recording relay, and `run` with the tap."""
    config = SimConfig(seed=7, speed=0.02, mean_output_tokens=100_000)
    with running_simulator(config) as simulator:
        relay = RecordingRelay(simulator.url)
        try:
            with sidecar_process(relay.url, "--proxy-listen", "127.0.0.1:0", *flags) as process:
                host, _, port = process.address("tap").rpartition(":")
                process.address("metrics")
                yield process, relay, (host, int(port))
        finally:
            relay.close()


def test_sigterm_drains_in_flight_streams_then_exits_0() -> None:
    with slow_stack("--shutdown-grace", "120") as (process, relay, tap):
        streams = [Stream(tap, max_tokens=64) for _ in range(5)]
        for stream in streams:
            assert stream.streaming.wait(60)
        process.process.send_signal(signal.SIGTERM)

        wait_until(lambda: refuses_connections(tap))
        metrics_url = f"http://{process.address('metrics')}"
        metrics = httpx.get(f"{metrics_url}/metrics", timeout=10)
        readyz = httpx.get(f"{metrics_url}/readyz", timeout=10)
        still_streaming = sum(not stream.ended.is_set() for stream in streams)

        assert process.wait(timeout=120) == 0
    assert still_streaming > 0, "the streams ended before /metrics was read: not a drain test"
    assert metrics.status_code == 200 and "specdec_requests_total" in metrics.text
    assert (readyz.status_code, readyz.text) == (503, "not ready: stopping: draining the tap\n")
    for stream in streams:
        assert stream.ended.wait(10) and stream.complete, stream.received[-200:]
        assert b"data: [DONE]" in stream.body and b'"completion_tokens":64' in stream.body
    replies = {bytes(reply).partition(b"\r\n\r\n")[2] for reply in relay.replies}
    assert all(stream.body in replies for stream in streams), "bytes differ from vLLM's"
    drained = next(r for r in process.records if r.get("msg") == "tap drained")
    assert (drained["in_flight"], drained["unfinished"]) == (5, 0)


def test_a_second_signal_exits_1_at_once() -> None:
    with slow_stack("--shutdown-grace", "120") as (process, _relay, tap):
        streams = [Stream(tap, max_tokens=2000) for _ in range(3)]
        for stream in streams:
            assert stream.streaming.wait(60)
        process.process.send_signal(signal.SIGTERM)
        process.wait_for_record(lambda r: r.get("msg") == "tap draining")
        assert process.stop(signal.SIGINT, timeout=60) == 1
    for stream in streams:
        assert stream.ended.wait(10) and not stream.complete
    assert any(r.get("msg") == "second stop signal: exiting now" for r in process.records)


def test_streams_still_running_when_the_grace_ends_are_cut_and_the_exit_is_0() -> None:
    with slow_stack("--shutdown-grace", "1") as (process, _relay, tap):
        streams = [Stream(tap, max_tokens=2000) for _ in range(3)]
        for stream in streams:
            assert stream.streaming.wait(60)
        assert process.stop(signal.SIGTERM, timeout=60) == 0
    for stream in streams:
        assert stream.ended.wait(10) and not stream.complete
    drained = next(r for r in process.records if r.get("msg") == "tap drained")
    assert (drained["in_flight"], drained["unfinished"]) == (3, 3)


@pytest.mark.anyio
async def test_a_stop_does_not_wait_for_a_component_in_its_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("specdec_exporter.sidecar.supervisor.STOP_TIMEOUT", 3600)
    supervisor = Supervisor(Backoff(first=3600, most=3600, steady=3600))
    metrics = Flaky(1)
    stops: list[str] = []
    supervisor.start("metrics_server", metrics.run, stop=lambda: stops.append("asked"))
    run = asyncio.create_task(supervisor.run())
    while supervisor.restarts["metrics_server"] == 0:
        await asyncio.sleep(0)
    supervisor.on_signal()  # no tap: the rest stops at once, a component in its backoff too
    assert await asyncio.wait_for(run, 60) == 0
    assert metrics.runs == 1 and stops == ["asked"]


@pytest.mark.anyio
async def test_a_cancellation_from_inside_a_component_is_its_failure() -> None:
    supervisor = Supervisor(QUICK)
    runs = 0
    serving = asyncio.Event()

    async def cancels_itself() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise asyncio.CancelledError
        serving.set()
        await asyncio.Event().wait()

    supervisor.start("poller", cancels_itself)
    run = asyncio.create_task(supervisor.run())
    await asyncio.wait_for(serving.wait(), 60)  # a bound: without the restart it never serves
    assert supervisor.restarts == {"poller": 1}
    supervisor.on_signal()
    assert await run == 0

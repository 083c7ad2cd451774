"""Issue 26, section 5: the sidecar's own port cannot blind it.

Through the real `specdec-exporter run`, with the open-file limit set low in the child: more
half-sent request heads on the metrics port than the process has descriptors must not stop its
polls of vLLM nor its `/healthz`, and a head that does not come is closed.
"""

from __future__ import annotations

import resource
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from fakevllm import fake_vllm
from scrape_spy import ScrapeSpy
from sidecar_process import SPECDEC, SidecarProcess, sidecar_process
from variants import capture

OPEN_FILES = 256
"""The child's open-file limit: a quarter of Docker's and containerd's default, 1,024."""
ATTACKERS = 300
"""Half-sent heads, more than OPEN_FILES."""
HALF_HEAD = b"GET /metrics HTTP/1.1\r\nHost: sidecar\r\n"


def open_files_limit(soft: int, hard: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


@contextmanager
def polled_sidecar(*flags: str, soft: int, hard: int) -> Iterator[tuple[SidecarProcess, ScrapeSpy]]:
    """`run` with the given open-file limits, polling a fake vLLM through a scrape counter."""
    with (
        fake_vllm(capture("t3")) as vllm,
        ScrapeSpy(vllm.url).running() as spy,
        sidecar_process(spy.url, *flags, preexec_fn=open_files_limit(soft, hard)) as running,
    ):
        assert spy.wait_for_scrapes(1, 30), running.records[-5:]
        yield running, spy


def half_sent_heads(address: tuple[str, int], count: int, stack: ExitStack) -> None:
    """``count`` connections that each send a request head without its last empty line."""
    for _ in range(count):
        attacker = stack.enter_context(socket.create_connection(address, timeout=5))
        attacker.sendall(HALF_HEAD)


def read_response(client: socket.socket) -> bytes:
    """One whole response with a Content-Length, read from a keep-alive connection."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += client.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += client.recv(65536)
    return head + b"\r\n\r\n" + body


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param((), id="connection-limit"),
        # With a connection limit above the open-file limit, the descriptor reserve holds.
        pytest.param(("--listen-max-connections", "100000"), id="descriptor-reserve"),
    ],
)
def test_half_sent_heads_beyond_the_open_file_limit_stop_neither_polls_nor_healthz(
    flags: tuple[str, ...],
) -> None:
    tap = ("--proxy-listen", "127.0.0.1:0")
    with polled_sidecar(*flags, *tap, soft=OPEN_FILES, hard=OPEN_FILES) as (running, spy):
        address = host_port(running.address("metrics"))
        with ExitStack() as attackers:
            half_sent_heads(address, ATTACKERS, attackers)
            polls = spy.scrapes
            # Before the fix: no poll at all (every descriptor held), /healthz never answered.
            assert spy.wait_for_scrapes(polls + 10, 20), "the sidecar stopped polling vLLM"
            health = httpx.get(f"http://{address[0]}:{address[1]}/healthz", timeout=5)
            assert health.status_code == 200
            through_the_tap = httpx.get(f"http://{running.address('tap')}/metrics", timeout=5)
            assert through_the_tap.status_code == 200
        assert running.process.poll() is None


def test_a_head_that_does_not_come_is_closed() -> None:
    with polled_sidecar("--listen-head-timeout", "0.5", soft=1024, hard=1024) as (running, _):
        address = host_port(running.address("metrics"))
        with socket.create_connection(address, timeout=10) as client:
            client.sendall(HALF_HEAD)
            assert client.recv(1024) == b""  # closed, not left waiting for the rest
        closed = "closed a connection of the metrics listener: its request head did not come"
        said = running.wait_for_record(lambda record: closed in str(record.get("msg")))
        assert (said["msg"], said["level"]) == (f"{closed} in 0.5 s", "warning")


def test_a_keep_alive_connection_gets_the_same_timeout_for_its_next_head() -> None:
    with polled_sidecar("--listen-head-timeout", "0.5", soft=1024, hard=1024) as (running, _):
        address = host_port(running.address("metrics"))
        with socket.create_connection(address, timeout=10) as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: sidecar\r\n\r\n")
            answer = read_response(client)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            client.sendall(HALF_HEAD)
            assert client.recv(1024) == b""


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    with polled_sidecar(soft=OPEN_FILES, hard=4 * OPEN_FILES) as (running, _):
        starting = running.wait_for_record(lambda record: record.get("msg") == "starting")
        assert starting["open_files_limit"] == 4 * OPEN_FILES


def test_a_reserve_that_leaves_the_listener_nothing_is_a_config_error() -> None:
    result = subprocess.run(
        [*SPECDEC, "run", "--listen", "127.0.0.1:0", "--listen-fd-reserve", "250"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=open_files_limit(OPEN_FILES, OPEN_FILES),
    )
    assert result.returncode == 64, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "--listen-fd-reserve 250 leaves --listen nothing of the open-file limit 256" in line

"""A chunked request with a trailer through the real `specdec-exporter run` (issue 19, item 1):
answered at once, as vLLM answers it directly, and counted in its bucket."""

from __future__ import annotations

import json
import socket
import time

import httpx

from sidecar_process import address_of, sidecar
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config

MODEL = "tiny-llama"
DEADLINE = 10.0
"""Seconds to wait for the answer: the bug held the connection for --proxy-timeout (600 s)."""


def chunked_request(host: str, body: bytes, trailer: bytes) -> bytes:
    half = len(body) // 2
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        % host.encode()
        + b"%x\r\n%b\r\n%x\r\n%b\r\n" % (half, body[:half], len(body) - half, body[half:])
        + b"0\r\n"
        + trailer
        + b"\r\n"
    )


def send(address: str, request: bytes) -> bytes:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=DEADLINE) as connection:
        connection.sendall(request)
        received = b""
        while chunk := connection.recv(65536):  # raises TimeoutError if the tap stalls
            received += chunk
    return received


def requests_counted(metrics_url: str, bucket: str) -> float:
    text = httpx.get(f"{metrics_url}/metrics", trust_env=False).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("specdec_requests_total{") and f'temperature_bucket="{bucket}"' in line
    )


def test_a_chunked_request_with_a_trailer_is_answered_through_run() -> None:
    config = SimConfig(
        served_model_name=MODEL,
        speed=50,
        mean_output_tokens=6,
        speculative=parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4}'),
        per_request_spec_decode_metrics="summary",
    )
    body = json.dumps(
        {
            "model": MODEL,
            "max_tokens": 6,
            "temperature": 0.0,
            "messages": [{"role": "user", "content": "class Foo:"}],
        }
    ).encode()
    with (
        running_simulator(config) as sim,
        sidecar(sim.url, "--proxy-listen", "127.0.0.1:0") as (metrics_url, records),
    ):
        tap = address_of(records, "tap")
        for trailer in (b"", b"X-Trailer: 1\r\n", b"X-One: 1\r\nX-Two: 2\r\n"):
            answer = send(tap, chunked_request(tap, body, trailer))
            head, _, payload = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), answer[:200]
            assert json.loads(payload)["choices"][0]["finish_reason"] is not None
        # the split's counters move at the sidecar's next poll of vLLM (tests poll every 0.2 s)
        deadline = time.monotonic() + DEADLINE
        while requests_counted(metrics_url, "0") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requests_counted(metrics_url, "0") == 3

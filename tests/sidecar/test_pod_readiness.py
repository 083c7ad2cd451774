"""Issue 26, section 6: with the tap, what the pod's readiness probe asks (`/readyz`) follows the
tap alone: it accepts and forwards. Never whether a poll of vLLM has completed or succeeded.
Through the real `specdec-exporter run`."""

from __future__ import annotations

import socket
import time

import httpx

from sidecar_process import sidecar_process


def test_with_the_tap_readyz_does_not_wait_for_a_poll_of_vllm() -> None:
    """Before: 503 "first poll of vLLM not done yet" for as long as a poll hangs (here up to
    --scrape-timeout 600 s), so the pod left its Service although the tap forwards."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        vllm = f"http://127.0.0.1:{silent.getsockname()[1]}"
        flags = ("--proxy-listen", "127.0.0.1:0", "--scrape-timeout", "600")
        with sidecar_process(vllm, *flags) as running:
            running.address("tap")
            readyz = f"http://{running.address('metrics')}/readyz"
            deadline = time.monotonic() + 15
            answer = httpx.get(readyz, timeout=5)
            while answer.status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
                answer = httpx.get(readyz, timeout=5)
            assert (answer.status_code, answer.text) == (200, "ready\n")
            metrics = httpx.get(f"http://{running.address('metrics')}/metrics", timeout=5)
            assert "specdec_up 0.0" in metrics.text  # no poll has succeeded (none has ended)

"""Issue 26, section 6: with the tap, what the pod's readiness probe asks (`/readyz`) follows the
tap alone: it accepts and forwards. Never whether a poll of vLLM has completed or succeeded.
Through the real `specdec-exporter run`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from types import SimpleNamespace

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


def test_with_the_tap_readyz_is_503_from_a_tap_runs_end_until_the_restarted_tap_listens() -> None:
    """The supervisor restarts a tap that failed after a backoff; meanwhile its clients wait in
    the socket's backlog, so /readyz must not say ready (it said so since the first listen)."""
    from specdec_exporter.sidecar.serve import _Readiness  # noqa: PLC0415

    async def scenario() -> list[str | None]:
        supervisor = SimpleNamespace(draining=asyncio.Event())
        poller = SimpleNamespace(first_poll_done=asyncio.Event())
        readiness = _Readiness(supervisor, poller, tap_enabled=True)  # type: ignore[arg-type]
        seen = [readiness.not_ready()]

        async def tap_run_that_fails() -> None:
            readiness.tap_listening(("127.0.0.1", 1))
            seen.append(readiness.not_ready())
            raise RuntimeError("the tap failed")

        with contextlib.suppress(RuntimeError):
            await readiness.while_tap_runs(tap_run_that_fails())
        seen.append(readiness.not_ready())
        readiness.tap_listening(("127.0.0.1", 1))  # the restarted run listens
        seen.append(readiness.not_ready())
        return seen

    assert asyncio.run(scenario()) == [
        "the tap is not listening yet",
        None,
        "the tap is not listening yet",
        None,
    ]

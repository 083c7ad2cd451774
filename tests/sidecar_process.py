"""Run `specdec-exporter run` as a real subprocess for tests; learn its addresses from its log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

import httpx

SPECDEC = [sys.executable, "-m", "specdec_exporter.cli"]
Record = dict[str, object]


FAST_SCRAPING = {"--interval": "0.2", "--scrape-timeout": "0.5", "--log-interval": "0"}
"""The tests' defaults (a test's own flag replaces one): quick polls against a quick vLLM."""


class SidecarProcess:
    """A running `specdec-exporter run` and the JSON log lines it has written so far."""

    def __init__(
        self, vllm_url: str, *extra: str, preexec_fn: Callable[[], object] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [
                *SPECDEC,
                "run",
                "--vllm-url",
                vllm_url,
                "--listen",
                "127.0.0.1:0",
                *(
                    part
                    for flag, value in FAST_SCRAPING.items()
                    if flag not in extra
                    for part in (flag, value)
                ),
                *extra,
            ],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=preexec_fn,  # noqa: PLW1509  a test's limits (setrlimit) for the child
        )
        assert self.process.stderr is not None
        self.records: list[Record] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(self.process.stderr,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.records.append(json.loads(line))
                self._changed.notify_all()

    def wait_for_record(self, matches: Callable[[Record], bool], timeout: float = 30) -> Record:
        """The first log record that ``matches``, waiting for it up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((record for record in self.records if matches(record)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                assert left > 0 and self.process.poll() is None, (
                    f"no such log record; exit code {self.process.poll()}: {self.records[-5:]}"
                )
                self._changed.wait(min(left, 0.5))

    def address(self, component: str) -> str:
        """HOST:PORT announced by the ``listening`` line of ``component`` (metrics or tap)."""
        record = self.wait_for_record(
            lambda r: r.get("msg") == "listening" and r.get("component") == component
        )
        return str(record["address"])

    def stop(self, number: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``number`` and wait for the exit code."""
        self.process.send_signal(number)
        return self.wait(timeout)

    def wait(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        assert self.process.stderr is not None
        self.process.stderr.close()


@contextmanager
def sidecar_process(
    vllm_url: str, *extra: str, preexec_fn: Callable[[], object] | None = None
) -> Iterator[SidecarProcess]:
    """A `SidecarProcess`, killed on exit if the test left it running."""
    process = SidecarProcess(vllm_url, *extra, preexec_fn=preexec_fn)
    try:
        yield process
    finally:
        process.close()


@contextmanager
def sidecar(vllm_url: str, *extra: str) -> Iterator[tuple[str, list[dict[str, object]]]]:
    """Run `specdec-exporter run` as a subprocess; yields its URL and its parsed log lines.

    With ``--proxy-listen`` in ``extra``, the tap's address is in the log line whose
    ``component`` is ``tap`` (see ``address_of``). Stopped with SIGTERM: must exit 0."""
    with sidecar_process(vllm_url, *extra) as running:
        if "--proxy-listen" in extra:
            running.address("tap")
        yield f"http://{running.address('metrics')}", running.records
        code = running.stop(timeout=15)
        assert code == 0, running.records[-5:]


def address_of(records: list[dict[str, object]], component: str) -> str:
    return next(
        str(r["address"])
        for r in records
        if r.get("msg") == "listening" and r.get("component") == component
    )


def wait_for(url: str, needle: str, timeout: float = 15) -> str:
    """GET ``url`` until its text holds ``needle`` and return the text; AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = httpx.get(url, timeout=5).text
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared in {url}:\n{text[:2000]}")

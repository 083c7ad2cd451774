"""Run `specdec-exporter run` as a real subprocess for tests; learn its addresses from its log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

SPECDEC = [sys.executable, "-m", "specdec_exporter.cli"]


@contextmanager
def sidecar(vllm_url: str, *extra: str) -> Iterator[tuple[str, list[dict[str, object]]]]:
    """Run `specdec-exporter run` as a subprocess; yields its URL and its parsed log lines.

    With ``--proxy-listen`` in ``extra``, the tap's address is in the log line whose
    ``component`` is ``tap`` (see ``address_of``)."""
    process = subprocess.Popen(
        [*SPECDEC, "run", "--vllm-url", vllm_url, "--listen", "127.0.0.1:0", "--interval", "0.2",
         "--scrape-timeout", "0.5", "--log-interval", "0", *extra],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stderr is not None
    records: list[dict[str, object]] = []
    announced = threading.Event()
    expected = 2 if "--proxy-listen" in extra else 1

    def drain(stream: IO[str]) -> None:
        for line in stream:
            records.append(json.loads(line))
            if sum(r.get("msg") == "listening" for r in records) == expected:
                announced.set()

    reader = threading.Thread(target=drain, args=(process.stderr,), daemon=True)
    reader.start()
    try:
        assert announced.wait(30), f"the sidecar did not announce its address: {records}"
        address = next(r["address"] for r in records if r.get("component") == "metrics")
        yield f"http://{address}", records
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=15)
        reader.join(timeout=5)
        process.stderr.close()
        assert code == 0, records[-5:]




def address_of(records: list[dict[str, object]], component: str) -> str:
    return next(str(r["address"]) for r in records
                if r.get("msg") == "listening" and r.get("component") == component)

"""The simulator as a child process (``specdec-exporter simulate --port 0``), for benchmarks that
measure something against it."""

from __future__ import annotations

import re
import subprocess
import sys
import threading


def start_simulator(flags: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start it with ``flags``; return the process and the base URL its first line announces."""
    command = [sys.executable, "-m", "specdec_exporter.cli", "simulate", "--port", "0", *flags]
    process = subprocess.Popen(command, stderr=subprocess.PIPE)
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe drained
    match = re.search(r"at (http://\S+)", line)
    if match is None:
        process.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return process, match.group(1)

"""The container's first process in Kubernetes: it runs `specdec-exporter run` and never exits
because of what the sidecar does (issue 26, section 6).

Any container of a pod that is not running makes the whole pod NotReady (the kubelet counts
native sidecars in ContainersReady), and a native sidecar that exits before the kubelet saw it
running holds back vLLM's start. So a sidecar fault must never end the container:

- the sidecar exits (a crash, a bad setting: exit 64): it is started again after a backoff
  (1 s, doubling to 60 s; back to 1 s after a minute up), one log line each time;
- it hangs: ``/healthz`` on ``SPECDEC_LISTEN`` is asked every 10 s (2 s timeout); three
  failures in a row, once it has answered or 60 s after its start, and it is killed and
  started again (the kubelet's liveness probe would restart the container instead);
- it grows towards the container's memory limit (the cgroup's ``memory.max``): above 85 % of
  it, it is killed and started again before the kernel's OOM killer ends the container.

SIGTERM and SIGINT go to the sidecar (which drains the tap); the keeper then exits with its
code. It imports only the standard library and ``specdec_exporter.logs``, so a broken sidecar
cannot break it. Run: ``python -m specdec_exporter.sidecar.keeper specdec-exporter run``.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from specdec_exporter.logs import configure_logging

log = logging.getLogger("specdec_exporter.keeper")

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0
STEADY_AFTER = 60.0
"""Seconds up after which a sidecar's exit is a new fault (the backoff starts again at 1 s)."""
HEALTH_PERIOD = 10.0
HEALTH_TIMEOUT = 2.0
HEALTH_FAILURES = 3
STARTUP_GRACE = 60.0
"""Seconds a sidecar that has never answered /healthz gets before its silence counts."""
MEMORY_SHARE = 0.85
"""Share of the container's memory limit at which the sidecar is restarted."""
WATCH_PERIOD = 1.0
CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)
DEFAULT_LISTEN = "0.0.0.0:10088"  # sidecar/config.py's default; the keeper must not import it


def health_url(listen: str) -> str:
    """``/healthz`` of a sidecar listening on ``listen`` (``HOST:PORT``), over loopback."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}/healthz" if ":" in host else f"http://{host}:{port}/healthz"


def memory_limit(paths: Sequence[Path] = CGROUP_LIMITS) -> int | None:
    """The container's memory limit in bytes, None without one (``max``, unreadable, absurd)."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for "none"
            return int(text)
        return None
    return None


def resident_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _wait(child: subprocess.Popen[bytes], timeout: float) -> int | None:
    """``child``'s exit code once it has ended, None after ``timeout`` seconds. One wake-up
    (a pidfd, Linux >= 5.3) rather than Popen.wait's polling every 50 ms."""
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # not Linux, or the child is already reaped
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    try:
        select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    return child.poll()


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


class Keeper:
    """Runs ``command`` until a signal, starting it again whenever it exits, hangs or grows."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        health: str,
        memory_ceiling: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._command = list(command)
        self._health = health
        self._ceiling = memory_ceiling
        self._clock = clock
        self._child: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._stop_signal = signal.SIGTERM
        self._signalled: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.reasons: list[str] = []

    def run(self, *, take_signals: bool = True) -> int:
        if take_signals:
            signal.signal(signal.SIGTERM, self._forward)
            signal.signal(signal.SIGINT, self._forward)
        backoff = FIRST_BACKOFF
        while not self._stopping.is_set():
            started = self._clock()
            try:
                self._child = subprocess.Popen(self._command)
            except OSError as exc:
                code, why = 127, f"cannot start it: {exc.strerror}"
            else:
                code, why = self._watch(self._child, started)
            if self._stopping.is_set():
                return code
            if self._clock() - started >= STEADY_AFTER:
                backoff = FIRST_BACKOFF
            self.restarts += 1
            self.reasons.append(why)
            log.error(
                "sidecar ended; starting it again",
                extra={
                    "component": "keeper",
                    "reason": why,
                    "exit_code": code,
                    "restarts": self.restarts,
                    "retry_in": backoff,
                },
            )
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
        return 0

    def _watch(self, child: subprocess.Popen[bytes], started: float) -> tuple[int, str]:
        """Wait for ``child`` to end; kill it if it hangs or outgrows the ceiling."""
        killed_for = ""
        answered = False
        failures = 0
        next_check = started + HEALTH_PERIOD
        while True:
            code = _wait(child, WATCH_PERIOD)
            if code is not None:
                return code, killed_for or f"exited with {code}"
            if self._stopping.is_set():
                if self._signalled is not child:  # the signal came before it started
                    self._signalled = child
                    child.send_signal(self._stop_signal)
                continue
            if killed_for:
                continue
            rss = resident_bytes(child.pid)
            if self._ceiling is not None and rss is not None and rss > self._ceiling:
                killed_for = f"memory: {rss >> 20} MiB resident, over {self._ceiling >> 20} MiB"
                child.kill()
                continue
            now = self._clock()
            if now < next_check:
                continue
            next_check = now + HEALTH_PERIOD
            if answers(self._health):
                answered, failures = True, 0
            elif answered or now - started >= STARTUP_GRACE:
                failures += 1
                if failures >= HEALTH_FAILURES:
                    killed_for = f"hung: {self._health} failed {failures} times in a row"
                    child.kill()

    def _forward(self, number: int, _frame: FrameType | None) -> None:
        self.stop(number)

    def stop(self, number: int = signal.SIGTERM) -> None:
        """Stop starting the sidecar, and pass ``number`` on to it if it runs."""
        self._stop_signal = signal.Signals(number)
        self._stopping.set()
        child = self._child
        if child is not None and child.poll() is None:
            self._signalled = child
            child.send_signal(number)


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("usage: python -m specdec_exporter.sidecar.keeper COMMAND...", file=sys.stderr)
        return 64
    try:
        configure_logging(os.environ.get("SPECDEC_LOG_LEVEL", "info"))
    except ValueError:  # a bad level is the sidecar's config error to report, not the keeper's
        configure_logging("info")
    limit = memory_limit()
    keeper = Keeper(
        command,
        health=health_url(os.environ.get("SPECDEC_LISTEN", DEFAULT_LISTEN)),
        memory_ceiling=None if limit is None else int(limit * MEMORY_SHARE),
    )
    return keeper.run()


if __name__ == "__main__":
    sys.exit(main())

"""Listening sockets for the addresses flags give, bound before anything serves: a port already
in use is one readable line naming the flag (a ConfigError), not a task's failure. And the
process's file descriptors, which every listener and the poller share."""

from __future__ import annotations

import os
import resource
import socket

from specdec_exporter.options import ConfigError


def cannot_listen(flag: str, host: str, port: int, exc: OSError) -> ConfigError:
    """The one line for an address that cannot be bound, with what to try."""
    reason = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
    return ConfigError(
        f"cannot listen on {host}:{port} ({flag}): {reason}; stop what uses it, or give "
        f"{flag} another address"
    )


def bind_listener(address: tuple[str, int], flag: str) -> socket.socket:
    """A listening TCP socket on ``address`` (IPv6 when the host has a colon); the server that
    takes it sets its own backlog."""
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise cannot_listen(flag, host, port, exc) from None


def raise_open_files_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit (as Go programs do at start),
    and return the soft limit now in force. Containers start with a soft limit of 1,024 and a
    much higher hard one; every tap request takes two descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            return soft
        return hard
    return soft


MIN_SPARE_DESCRIPTORS = 32
"""What the open-file limit must hold beyond --listen-fd-reserve: the process's own files and
sockets, and a few connections to --listen (kubelet, Prometheus)."""


def check_fd_reserve(reserve: int, open_files: int) -> None:
    """A reserve that leaves --listen no descriptor would refuse even /healthz: one line."""
    if open_files != resource.RLIM_INFINITY and reserve > open_files - MIN_SPARE_DESCRIPTORS:
        raise ConfigError(
            f"--listen-fd-reserve {reserve} leaves --listen nothing of the open-file limit "
            f"{open_files}: give at most {max(open_files - MIN_SPARE_DESCRIPTORS, 0)}, or raise "
            "the limit (ulimit -n)"
        )


def free_descriptors() -> int | None:
    """How many more files this process may open before its soft RLIMIT_NOFILE (None where
    /proc/self/fd cannot tell)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        in_use = len(os.listdir("/proc/self/fd")) - 1  # listing it takes one
    except OSError:
        return None
    return soft - in_use

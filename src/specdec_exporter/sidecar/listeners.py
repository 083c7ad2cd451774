"""Listening sockets for the addresses flags give, bound before anything serves: a port already
in use is one readable line naming the flag (a ConfigError), not a task's failure."""

from __future__ import annotations

import os
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

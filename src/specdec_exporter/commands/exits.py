"""Every command's exit codes, written once (the README's exit-code table lists the same), and the
one error every command raises when a server it was pointed at does not answer as that server."""

from __future__ import annotations

import httpx

from specdec_exporter.options import redact_url

EXIT_OK = 0
EXIT_FAILED = 1
"""`check`: a verdict that asks for a look; `run`: a task died; `load`, `sweep`: requests failed;
`calibrate`: nothing to fit."""
EXIT_DISABLE = 2
"""`check`: speculation is a net loss by the model, or is not enabled."""
EXIT_UNREACHABLE = 3
"""A server a flag names (vLLM, the sidecar) did not answer, or not as that server would."""
EXIT_USAGE = 64
"""A usage or config error (sysexits.h EX_USAGE), a port already in use included. No verdict of
`check` uses it, so a CI gate can tell "typo in a flag" from "disable speculation" (2)."""
EXIT_UNAVAILABLE = 69
"""The command needs a dev tool this installation leaves out (sysexits.h EX_UNAVAILABLE)."""
EXIT_CANNOT_WRITE = 73
"""`install-probe`: the probe cannot be written into DIR, or DIR holds a `specdec_exporter/` that
no earlier install-probe wrote (sysexits.h EX_CANTCREAT)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as a shell reports it)."""

ALL_EXIT_CODES = (
    EXIT_OK,
    EXIT_FAILED,
    EXIT_DISABLE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    EXIT_UNAVAILABLE,
    EXIT_CANNOT_WRITE,
    EXIT_INTERRUPTED,
)


class UnreachableError(Exception):
    """A server did not answer as the flag that names it says it would. The command line prints
    the message, one line naming the URL and what to try, and exits ``EXIT_UNREACHABLE``."""

    def __init__(self, url: str, detail: str, flag: str, what: str = "vLLM") -> None:
        url, detail = redact_url(url), redact_url(detail)  # printed: no credentials
        super().__init__(
            f"{what} at {url} did not answer: {detail}. Is it running there? {flag} takes its "
            "base URL, http://HOST:PORT, with or without /v1"
        )
        self.url = url
        self.detail = detail


def describe_http_error(exc: httpx.HTTPError) -> str:
    """What a failed request means to a person, without the exception's class name."""
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return "the connection broke off"

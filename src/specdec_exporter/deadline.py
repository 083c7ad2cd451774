"""One httpx call with a total deadline: connecting, sending and every read of the answer within
one number of seconds. httpx's own timeouts are per read, so a server that trickles a byte every
half second would hold a request for ever; every HTTP call of every command goes through here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx


class DeadlineExceeded(httpx.TimeoutException):
    """The whole call took longer than its deadline: an ``httpx.TimeoutException``, so whoever
    handles a timeout handles this one too."""


@contextlib.asynccontextmanager
async def total_deadline(seconds: float) -> AsyncIterator[None]:
    """Everything inside (a request, the reading of its body) ends within ``seconds``, else
    ``DeadlineExceeded`` is raised out of it."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise DeadlineExceeded(f"no complete answer within {seconds:g} s") from None

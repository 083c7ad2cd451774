"""Correctness of the tap's HTTP/1.1 handling against desync, smuggling and framing faults.

Each test drives the real tap over raw sockets; docs/reliability.md lists what each covers.
"""

from __future__ import annotations

import json

import pytest
from tapfakes import (
    MODEL,
    json_reply,
    read_all,
    running_tap,
)

pytestmark = pytest.mark.anyio
CHAT = "/v1/chat/completions"
SMALL = json_reply({"ok": True})
GREEDY = json.dumps({"model": MODEL, "temperature": 0.0, "messages": []}).encode()
UPGRADE_HEAD = (b"GET /v1/realtime HTTP/1.1\r\nhost: tap\r\nupgrade: websocket\r\n"
                b"connection: Upgrade\r\n\r\n")
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nhost: tap\r\n\r\n"
OK_2 = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno"


def requests_counted(tap: object) -> int:
    return sum(row.requests for row in tap.stats.bucket_summary())  # type: ignore[attr-defined]


# 7. Host


@pytest.mark.parametrize(
    ("request_bytes", "host"),
    [
        (b"GET /a HTTP/1.1\r\nhost: tap.example\r\nconnection: Host, close\r\n\r\n", "tap.example"),
        (b"GET /a HTTP/1.0\r\nconnection: host\r\n\r\n", None),
    ],
    ids=["client-host-nominated", "no-host"],
)
async def test_host_is_always_sent_upstream(request_bytes: bytes, host: str | None) -> None:
    async with running_tap(lambda _: SMALL) as tap:
        raw = await read_all(tap.address, request_bytes)
        assert raw.startswith(b"HTTP/1.1 200")
        expected = host or "{}:{}".format(*tap.upstream_address)
        assert tap.upstream.received[0].headers.get("host") == expected

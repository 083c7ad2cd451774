"""Which requests the tap inspects: every target uvicorn routes to an inspected endpoint, and
no other. The simulator runs under uvicorn (httptools) as vLLM does, so "served 200" is real."""

from __future__ import annotations

import json

import pytest
from tapfakes import raw_exchange, running_tap, split_response

from specdec_exporter.devtools.sim import server as sim_server
from specdec_exporter.devtools.sim import settings as sim_settings
from specdec_exporter.tap.routes import route_path, upstream_target

pytestmark = pytest.mark.anyio
TARGETS = [
    b"/v1/chat/completions",
    b"http://vllm.example/v1/chat/completions",
    b"https://vllm.example:8000/v1/completions?x=1#y",
    b"/v1/chat/%63ompletions",
    b"/v1/chat%2Fcompletions",
    b"/v1/chat/completions#x",
    b"/v1/chat/completions?stream=false",
    b"/v1/%63%6F%6D%70%6C%65%74%69%6F%6E%73",
    b"//v1/chat/completions",
    b"/v1//chat/completions",
    b"/v1/chat/completions/",
    b"/V1/chat/completions",
    b"/v1/chat/completions%3Fx",
    b"/v1/chat/completions%23x",
    b"/v1/chat/completions;x",
    b"http://vllm.example",
]


def request(target: bytes, model: str) -> bytes:
    """A valid request for the endpoint the target names (chat or plain completions)."""
    shape = (
        {"messages": [{"role": "user", "content": "hi"}]} if b"chat" in target else {"prompt": "hi"}
    )
    body = json.dumps({"model": model, "temperature": 0.0, "max_tokens": 4, **shape}).encode()
    return (
        b"POST %b HTTP/1.1\r\nhost: vllm\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (target, len(body), body)
    )


def status_of(raw: bytes) -> int:
    return int(split_response(raw)[0].split(b" ")[1])


async def test_served_200_if_and_only_if_counted() -> None:
    config = sim_settings.SimConfig(
        speculative=sim_settings.SpeculativeConfig("ngram", 4),
        per_request_spec_decode_metrics="summary",
        speed=50.0,
        mean_output_tokens=4,
    )
    with sim_server.running_simulator(config) as sim:
        model = sim.config.served_model_name
        host, port = sim.url.removeprefix("http://").rsplit(":", 1)
        served = 0
        async with running_tap(upstream_url=sim.url, models=frozenset({model})) as tap:
            for target in TARGETS:
                direct = status_of(await raw_exchange((host, int(port)), request(target, model)))
                before = sum(row.requests for row in tap.stats.bucket_summary())
                through = status_of(await raw_exchange(tap.address, request(target, model)))
                counted = sum(row.requests for row in tap.stats.bucket_summary()) - before
                assert through == direct, target
                assert counted == (1 if direct == 200 else 0), target
                served += direct == 200
    assert served == 8  # the first eight targets reach an inspected endpoint, the rest do not


def test_route_path_as_uvicorn_gives_it() -> None:
    assert route_path(b"http://h/v1/chat/completions?x#y") == "/v1/chat/completions"
    assert route_path(b"/v1/chat%2Fcompletions") == "/v1/chat/completions"
    assert route_path(b"//v1/chat/completions") == "//v1/chat/completions"  # no slash merging
    assert route_path(b"h:443") is None
    assert route_path(b"/\xff") is None


def test_upstream_target_keeps_the_original_bytes() -> None:
    assert upstream_target(b"", b"http://h/v1/x?q") == b"http://h/v1/x?q"
    assert upstream_target(b"/p", b"/v1/%63x#f") == b"/p/v1/%63x#f"
    assert upstream_target(b"/p", b"http://h/v1/x?q") == b"http://h/p/v1/x?q"
    assert upstream_target(b"/p", b"http://h?q") == b"http://h/p?q"

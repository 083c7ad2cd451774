"""Reading the probe through the real `run` (issue 26, section 4): a probe label the sidecar cannot
read fails that series only, and probe buckets not among --temperature-buckets are never mirrored;
both are counted in specdec_invalid_series_total, the poll succeeds, nothing is logged as an
internal error."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from fakevllm import fake_vllm, serving
from probe_text import probe_text
from sidecar_process import address_of, sidecar, wait_for
from variants import MODEL, capture

ACCEPTANCE_LINE = f'specdec_probe_acceptance_rate_bucket{{le="0.05",model_name="{MODEL}",'


def samples(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_a_histogram_line_with_le_abc_fails_that_series_only() -> None:
    """It used to escape the parser as a ValueError: an internal error with a traceback, every
    poll failed ("parse"), nothing of the probe exported."""
    body = capture("t3") + probe_text()
    assert ACCEPTANCE_LINE + 'temperature_bucket="0.7-1.0"}' in body
    body = body.replace(
        ACCEPTANCE_LINE + 'temperature_bucket="0.7-1.0"}',
        f'specdec_probe_acceptance_rate_bucket{{le="abc",model_name="{MODEL}",'
        'temperature_bucket="0.7-1.0"}',
    )
    with fake_vllm(body) as vllm, sidecar(vllm.url) as (url, records):
        text = wait_for(url + "/metrics", 'specdec_invalid_series_total{reason="bad_label"} ')
        assert "specdec_up 1.0" in text
        assert not samples(text, 'specdec_invalid_series_total{reason="bad_label"} 0.0')
        # the other buckets are mirrored; the one with the bad line is left out, whole
        assert f'specdec_requests_total{{attributed="true",model_name="{MODEL}",' in text
        assert not [line for line in samples(text, "specdec_request") if '"0.7-1.0"' in line]
        assert samples(text, "specdec_request_drafts_total{")
    assert not [r for r in records if "unexpected error" in str(r.get("msg"))]
    assert not [r for r in records if r.get("exc_info") or "Traceback" in str(r)]


def test_probe_buckets_not_among_the_sidecars_edges_are_not_mirrored() -> None:
    """1,501 foreign buckets used to be mirrored onto the sidecar's /metrics without a word."""
    foreign = "".join(
        f'specdec_probe_sequences_total{{model_name="{MODEL}",temperature_bucket="{i}.5-{i}.7"}}'
        " 1.0\n"
        for i in range(1501)
    )
    with (
        fake_vllm(capture("t3") + probe_text() + foreign) as vllm,
        sidecar(vllm.url) as (url, records),
    ):
        text = wait_for(url + "/metrics", 'specdec_invalid_series_total{reason="foreign_bucket"} ')
        assert not samples(text, 'specdec_invalid_series_total{reason="foreign_bucket"} 0.0')
        buckets = {
            line.split('temperature_bucket="', 1)[1].split('"', 1)[0]
            for line in samples(text, "specdec_request")
        }
        assert buckets == {"0", "0-0.5", "0.5-0.7", "0.7-1.0", "1.0+"}
        wait_for(url + "/metrics", 'specdec_invalid_series_total{reason="foreign_bucket"} 3')
        assert httpx.get(url + "/metrics", timeout=10).status_code == 200
    said = [r for r in records if "not among --temperature-buckets" in str(r.get("msg"))]
    assert len(said) == 1, said  # logged once, however many polls show them


def requests_total(text: str) -> float | None:
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in samples(text, "specdec_requests_total{")
        if f'model_name="{MODEL}"' in line
    ]
    return sum(values) if values else None


def test_a_flapping_info_series_never_moves_the_split_counters_through_run() -> None:
    """The probe's info flaps on, on, off, off, ... with its counts still and a tap on: the
    exported specdec_requests_total used to flip between the probe's 3 and the tap's 0 (each flip
    back an increase() of 3 that never happened); it stays at 3."""
    on = capture("t3") + probe_text()
    off = on.replace('temperature_split="on"', 'temperature_split="off"')
    with (
        fake_vllm(on) as vllm,
        sidecar(vllm.url, "--proxy-listen", "127.0.0.1:0") as (url, _),
    ):
        wait_for(url + "/metrics", "specdec_requests_total{")
        vllm.serve_in_turn(*([on, on, off, off] * 6), on)
        seen = set()
        deadline = time.monotonic() + 60
        while vllm.requests < 26:  # the sidecar polls every 0.2 s
            assert time.monotonic() < deadline, "the sidecar stopped polling"
            seen.add(requests_total(httpx.get(url + "/metrics", timeout=10).text))
        assert seen == {3.0}, seen


SPEC_ANSWER = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12},
        "metrics": {
            "speculative_decoding": {
                "num_spec_steps": 2,
                "num_draft_tokens": 8,
                "num_accepted_draft_tokens": 4,
                "num_spec_tokens": 4,
            }
        },
    }
).encode()


class Vllm:
    """/metrics as the test sets it, and chat completions that carry speculative figures."""

    def __init__(self) -> None:
        self.body = b""
        self.polls = 0
        self.polled = threading.Event()
        vllm = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                vllm.polls += 1
                self._answer(vllm.body, "text/plain; version=0.0.4")
                vllm.polled.set()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                self._answer(SPEC_ANSWER, "application/json")

            def _answer(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def greedy_drafts(text: str) -> float | None:
    found = samples(
        text, f'specdec_request_drafts_total{{model_name="{MODEL}",temperature_bucket="0"}}'
    )
    return float(found[0].rsplit(" ", 1)[1]) if found else None


def test_requests_through_the_tap_after_vllm_restarts_without_the_probe_are_counted() -> None:
    """vLLM restarts without the probe; 3 requests pass the tap before the sidecar's next poll.
    They used to be erased by the tap's reset at that poll (the greedy bucket read 0)."""
    vllm = Vllm()
    vllm.body = (capture("t3") + probe_text()).encode()
    with (
        serving(vllm.server),
        sidecar(vllm.url, "--proxy-listen", "127.0.0.1:0", "--interval", "2") as (url, records),
    ):
        text = wait_for(url + "/metrics", 'specdec_temperature_split_info{source="probe"}')
        from_probe = greedy_drafts(text)
        assert from_probe == 20.0
        vllm.polled.clear()
        assert vllm.polled.wait(30)  # right after a poll: the next is 2 s away
        polled = vllm.polls
        vllm.body = capture("t3").encode()  # vLLM restarted without the probe
        tap = address_of(records, "tap")
        for _ in range(3):
            answer = httpx.post(
                f"http://{tap}/v1/chat/completions",
                json={
                    "model": MODEL,
                    "temperature": 0,
                    "messages": [{"role": "user", "content": "hi"}],
                },
                timeout=10,
            )
            assert answer.status_code == 200
        assert vllm.polls == polled, "a poll came between: the test needs a slower interval"
        text = wait_for(url + "/metrics", 'specdec_temperature_split_info{source="tap"}')
        assert greedy_drafts(text) == from_probe + 3 * 2

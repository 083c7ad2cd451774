"""The whole sidecar at --log-level debug, tap on, through successes and failures: no request body,
prompt, completion, Authorization value or vLLM /metrics body reaches its log, extras included."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx

from sidecar_process import address_of, sidecar
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config

PROMPT = "prompt-7f3a-must-never-be-logged"
API_KEY = "sk-7f3a-must-never-be-logged"
METRICS_BODY_MARKERS = ("not an exposition", "Authentication required")  # the /sim/fault bodies
MODEL = "private-model"
DEADLINE = 20.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def stream_text(body: str) -> str:
    pieces = []
    for line in body.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                pieces.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
    return "".join(pieces)


def test_debug_logs_hold_no_body_prompt_completion_or_key() -> None:
    config = SimConfig(
        served_model_name=MODEL,
        speed=20,
        mean_output_tokens=12,
        speculative=parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4}'),
        per_request_spec_decode_metrics="summary",
    )
    completions: list[str] = []
    with (
        running_simulator(config) as sim,
        sidecar(sim.url, "--proxy-listen", "127.0.0.1:0", "--log-level", "debug") as (_, records),
    ):
        tap = f"http://{address_of(records, 'tap')}"
        chat = {
            "model": MODEL,
            "max_tokens": 12,
            "temperature": 0.5,
            "messages": [{"role": "user", "content": PROMPT}],
        }
        with httpx.Client(
            base_url=tap, trust_env=False, headers={"authorization": f"Bearer {API_KEY}"}
        ) as client:
            answer = client.post("/v1/chat/completions", json=chat).json()
            completions.append(answer["choices"][0]["message"]["content"])
            streamed = client.post("/v1/chat/completions", json={**chat, "stream": True})
            completions.append(stream_text(streamed.text))
            text = client.post(
                "/v1/completions",
                json={"model": MODEL, "prompt": PROMPT, "max_tokens": 12, "stream": True},
            )
            completions.append(stream_text(text.text))
            broken = client.post(
                "/v1/chat/completions",
                content=b'{"broken ' + PROMPT.encode(),
                headers={"content-type": "application/json"},
            )
            assert broken.status_code == 400
            for kind in ("garbage", "html"):  # the scraper's failure path, with odd bodies
                httpx.post(f"{sim.url}/sim/fault", json={"kind": kind, "seconds": 30})
                wait_for(
                    lambda kind=kind: any(  # type: ignore[misc]
                        record.get("msg") == "vLLM scrape failed" for record in records[-3:]
                    ),
                    f"a logged scrape failure under the {kind} fault",
                )
                httpx.post(f"{sim.url}/sim/fault", json={"kind": "none"})
            # vLLM refusing connections: the tap answers 502 and logs its connect failure. The
            # first POST may go out on a pooled connection the simulator is closing that moment:
            # a 502 with the not-resent warning (a written POST is never sent twice), so ask
            # until a fresh connection is refused
            httpx.post(f"{sim.url}/sim/fault", json={"kind": "refuse", "seconds": 3})
            wait_for(
                lambda: (
                    client.post("/v1/chat/completions", json=chat).status_code == 502
                    and any("cannot connect to vLLM" in json.dumps(record) for record in records)
                ),
                "a 502 from the tap and its connect failure logged while vLLM refuses connections",
            )
    assert all(len(completion) > 10 for completion in completions), completions
    logged = "\n".join(json.dumps(record) for record in records)
    assert '"level": "warning"' in logged and "cannot connect to vLLM" in logged
    for secret in (PROMPT, API_KEY, "Bearer", *completions, *METRICS_BODY_MARKERS):
        assert secret not in logged, f"{secret!r} was logged"

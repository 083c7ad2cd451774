"""The alert path on a real vLLM: real vLLM -> `specdec-exporter run` with its tap -> real
Prometheus (generated rules, short `for`) -> real Alertmanager -> PagerDuty stub.

Greedy traffic (acceptance ~0.7 on this server) must not page; T=1.0 traffic (~0.2, below the
threshold while the modelled speedup with c = 0.1 stays above 1) must page, critical, for the model
(SpecDecodeAcceptanceLow), and ticket its temperature bucket in chat.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
for folder in (REPO / "tools", REPO / "tests" / "artifacts", REPO / "tests" / "e2e"):
    sys.path.insert(0, str(folder))

from alert_stack import (  # noqa: E402
    BackgroundLoad,
    Stack,
    bucket_acceptance,
    chat_mentions,
    running_stack,
)
from monitoring_processes import wait_until  # noqa: E402

from sidecar_process import address_of, sidecar  # noqa: E402
from specdec_exporter.devtools.load.config import LoadConfig  # noqa: E402
from specdec_exporter.devtools.load.mix import parse_mix  # noqa: E402
from specdec_exporter.sidecar.config import Settings  # noqa: E402

pytestmark = pytest.mark.real_vllm
TIMEOUT = 180.0
DEFAULT_TIMEOUT = str(Settings.model_fields["scrape_timeout"].default)
"""The sidecar's own scrape timeout, which the alert path runs with (see alert_chain)."""


def traffic(url: str, temperature: str) -> BackgroundLoad:
    """Steady load at one temperature through the tap, until the block ends."""
    return BackgroundLoad(
        LoadConfig(
            url=url,
            concurrency=4,
            requests=8,
            max_tokens=32,
            seed=11,
            mix=parse_mix(temperature),
            stream_share=0.5,
        )
    )


@pytest.fixture
def alert_chain(real_vllm: Any, tmp_path: Path) -> Iterator[tuple[str, Stack]]:
    """The tap's URL, and the stack alerting on the sidecar in front of the real vLLM."""
    with (
        # The sidecar's default scrape timeout, not the harness's quick one: on these two cores,
        # busy with hot traffic, real vLLM answered /metrics in over 0.5 s for minutes once, and
        # the chain rightly paged VLLMUnreachable instead of AcceptanceLow.
        sidecar(
            real_vllm.url, "--proxy-listen", "127.0.0.1:0", "--scrape-timeout", DEFAULT_TIMEOUT
        ) as (sidecar_url, records),
        running_stack(tmp_path, [sidecar_url.removeprefix("http://")]) as stack,
    ):
        yield "http://" + address_of(records, "tap"), stack


def test_t1_traffic_pages_and_greedy_traffic_does_not(alert_chain: tuple[str, Stack]) -> None:
    tap, stack = alert_chain
    stub, prometheus = stack.stub, stack.prometheus
    with traffic(tap, "0") as greedy:
        wait_until(
            lambda: "0" in bucket_acceptance(prometheus),
            TIMEOUT,
            "greedy acceptance to be recorded",
        )
        # Several `for` periods and evaluation rounds pass with greedy acceptance recorded.
        wait_until(lambda: len(_samples(prometheus)) >= 20, TIMEOUT, "20 s of greedy data")
        assert bucket_acceptance(prometheus)["0"] > 0.5
    assert greedy.errors == 0
    assert [e for e in stub.events() if e["event_action"] == "trigger"] == [], (
        "greedy traffic on this server must not page"
    )

    with traffic(tap, "1.0") as hot:
        page = stub.wait_for_event(lambda e: _paged(e, "SpecDecodeAcceptanceLow "), TIMEOUT)
        assert page["payload"]["severity"] == "critical"
        assert "below its threshold t = 50%" in page["payload"]["custom_details"]["alerts"]
        assert "c = 0.1 (source: " in page["payload"]["custom_details"]["alerts"]
        wait_until(
            lambda: chat_mentions(stub, "SpecDecodeBucketAcceptanceLow"),
            TIMEOUT,
            "the hot bucket's ticket to reach chat",
        )
        assert bucket_acceptance(prometheus)["0.7-1.0"] < 0.5
    assert hot.errors == 0


def _paged(event: dict[str, Any], alertname: str) -> bool:
    details = event["payload"].get("custom_details", {})
    return event["event_action"] == "trigger" and alertname in details.get("alerts", "")


def _samples(prometheus: Any) -> list[Any]:
    reply = httpx.get(
        prometheus.url + "/api/v1/query", params={"query": "specdec_up[1m]"}, timeout=5
    )
    result: list[Any] = reply.json()["data"]["result"]
    return result[0]["values"] if result else []

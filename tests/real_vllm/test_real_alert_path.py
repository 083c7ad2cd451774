"""The alert path on a real vLLM: real vLLM -> `specdec-exporter run` with its tap -> real
Prometheus (generated rules, short `for`) -> real Alertmanager -> PagerDuty stub.

Greedy traffic (acceptance ~0.7 on this server) must not page; T=1.0 traffic (~0.2, below the
threshold while the modelled speedup with c = 0.1 stays above 1) must page, critical, for the model
(SpecDecodeAcceptanceLow), and ticket its temperature bucket in chat.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
for folder in (REPO / "tools", REPO / "tests" / "artifacts", REPO / "tests" / "e2e"):
    sys.path.insert(0, str(folder))

from monitoring_processes import (  # noqa: E402
    ALERTMANAGER_BINARIES,
    PROMETHEUS_BINARIES,
    start_alertmanager,
    start_prometheus,
    wait_until,
)
from pagerduty_stub import PagerDutyStub  # noqa: E402
from required_tools import require  # noqa: E402
from test_alert_chain import (  # noqa: E402
    TARGET_LABELS,
    alertmanager_config,
    bucket_acceptance,
    chat_mentions,
    generate_test_variant,
)

from sidecar_process import address_of, sidecar  # noqa: E402
from specdec_exporter.devtools.load.mix import parse_mix  # noqa: E402
from specdec_exporter.devtools.load.runner import LoadConfig, run_load  # noqa: E402

pytestmark = pytest.mark.real_vllm
TIMEOUT = 180.0


class Traffic:
    """Steady load at one temperature through the tap, in a thread, until stopped."""

    def __init__(self, url: str, temperature: str) -> None:
        self.config = LoadConfig(url=url, concurrency=4, requests=8, max_tokens=32, seed=11,
                                 mix=parse_mix(temperature), stream_share=0.5)
        self.stop = threading.Event()
        self.errors = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            result = asyncio.run(run_load(self.config))
            self.errors += sum(1 for r in result.results if r.error)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=120)


@pytest.fixture
def alert_chain(real_vllm: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    work = tmp_path
    generated = generate_test_variant(work / "generated")
    stub = PagerDutyStub().start()
    with sidecar(real_vllm.url, "--proxy-listen", "127.0.0.1:0") as (sidecar_url, records):
        alertmanager = start_alertmanager(require(*ALERTMANAGER_BINARIES), work / "am",
                                          alertmanager_config(work, stub))
        prometheus = start_prometheus(
            require(*PROMETHEUS_BINARIES), work / "prometheus",
            rules_file=generated / "alerts" / "specdec-rules.yaml",
            scrape_targets=[sidecar_url.removeprefix("http://")],
            alertmanager_url=alertmanager.url, target_labels=TARGET_LABELS)
        try:
            yield {"tap": "http://" + address_of(records, "tap"), "stub": stub,
                   "prometheus": prometheus}
        finally:
            prometheus.stop()
            alertmanager.stop()
            stub.stop()


def test_t1_traffic_pages_and_greedy_traffic_does_not(alert_chain: dict[str, Any]) -> None:
    stub, prometheus = alert_chain["stub"], alert_chain["prometheus"]
    with Traffic(alert_chain["tap"], "0") as greedy:
        wait_until(lambda: "0" in bucket_acceptance(prometheus), TIMEOUT,
                   "greedy acceptance to be recorded")
        # Several `for` periods and evaluation rounds pass with greedy acceptance recorded.
        wait_until(lambda: len(_samples(prometheus)) >= 20, TIMEOUT, "20 s of greedy data")
        assert bucket_acceptance(prometheus)["0"] > 0.5
    assert greedy.errors == 0
    assert [e for e in stub.events() if e["event_action"] == "trigger"] == [], (
        "greedy traffic on this server must not page")

    with Traffic(alert_chain["tap"], "1.0") as hot:
        page = stub.wait_for_event(lambda e: _paged(e, "SpecDecodeAcceptanceLow "), TIMEOUT)
        assert page["payload"]["severity"] == "critical"
        assert "below its threshold t = 50%" in page["payload"]["custom_details"]["alerts"]
        assert "(c = 0.1)" in page["payload"]["custom_details"]["alerts"]
        wait_until(lambda: chat_mentions(stub, "SpecDecodeBucketAcceptanceLow"), TIMEOUT,
                   "the hot bucket's ticket to reach chat")
        assert bucket_acceptance(prometheus)["0.7-1.0"] < 0.5
    assert hot.errors == 0


def _paged(event: dict[str, Any], alertname: str) -> bool:
    details = event["payload"].get("custom_details", {})
    return event["event_action"] == "trigger" and alertname in details.get("alerts", "")


def _samples(prometheus: Any) -> list[Any]:
    import httpx  # noqa: PLC0415

    reply = httpx.get(prometheus.url + "/api/v1/query",
                      params={"query": "specdec_up[1m]"}, timeout=5)
    result: list[Any] = reply.json()["data"]["result"]
    return result[0]["values"] if result else []

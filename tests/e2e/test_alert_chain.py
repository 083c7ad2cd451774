"""End to end: exporter -> real Prometheus (generated rules, short `for`) -> real Alertmanager
(generated routing) -> PagerDuty Events v2 stub. A bucket's acceptance drops: its ticket and the
P10 warning reach chat, nothing pages. The modelled speedup falls below 1 with the method's
default c: a ticket; with a calibrated c: a `trigger` for the model arrives, critical, with the
runbook link; it recovers: a `resolve` follows. Acceptance below t: the second page. Another
team's critical alert goes to the default receiver, never to ours.

The exporter is a fake serving the contract metrics; the final proof swaps in the simulator and
the real sidecar with its tap (see docs/alerting.md, "End-to-end test").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from alert_stack import (
    EVENT_TIMEOUT,
    ROUTING_KEY,
    WINDOW,
    Stack,
    alerting,
    bucket_acceptance,
    chat_mentions,
    running_stack,
)
from fake_specdec_exporter import BucketTraffic, FakeSpecdecExporter
from monitoring_processes import Process, wait_until
from promql_evaluation import dashboard_expressions, evaluate, rule_expressions
from specdec_artifacts.dashboard import dashboard
from specdec_artifacts.settings import Settings, load, with_test_overrides

pytestmark = pytest.mark.e2e

MODEL = "llama-e2e"
HEALTHY, DEGRADED = "0", "0.7-1.0"


@pytest.fixture(scope="module")
def exporter() -> Iterator[FakeSpecdecExporter]:
    fake = FakeSpecdecExporter(
        MODEL, {HEALTHY: BucketTraffic(100, 0.8), DEGRADED: BucketTraffic(100, 0.8)}
    ).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def stack(
    exporter: FakeSpecdecExporter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("e2e"), [exporter.target]) as running:
        yield running


def test_only_the_two_pages_page(stack: Stack, exporter: FakeSpecdecExporter) -> None:
    """A degraded bucket tickets; a modelled net loss on the method's default c tickets; the
    same net loss on a calibrated c pages, then resolves; acceptance below t pages, saying the
    model still calls speculation a gain. Nothing else ever reaches PagerDuty."""
    wait_until(
        lambda: set(bucket_acceptance(stack.prometheus)) == {HEALTHY, DEGRADED},
        EVENT_TIMEOUT,
        "both buckets' acceptance to be recorded",
    )
    assert stack.stub.events() == [], "nothing may page while acceptance is 0.8"

    exporter.set_acceptance(DEGRADED, 0.3)  # the model: 0.55, at or above t
    wait_until(
        lambda: chat_mentions(stack.stub, "SpecDecodeBucketAcceptanceLow"),
        EVENT_TIMEOUT,
        "the bucket's ticket to reach the chat receiver",
    )
    wait_until(
        lambda: chat_mentions(stack.stub, "SpecDecodeBucketAcceptanceTailLow"),
        EVENT_TIMEOUT,
        "the bucket's P10 warning to reach the chat receiver",
    )
    assert stack.stub.events() == [], "a bucket tickets by default; it does not page"

    exporter.set_speedup(0.8)  # with c the method's default: an assumption
    wait_until(
        lambda: chat_mentions(stack.stub, "SpecDecodeSpeedupBelowOneAssumedCost"),
        EVENT_TIMEOUT,
        "the assumed-cost net loss to reach chat as a ticket",
    )
    assert stack.stub.events() == [], "a net loss on an assumed c does not page"

    exporter.set_cost("calibration", 0.3)
    trigger = stack.stub.wait_for_event(lambda e: e["event_action"] == "trigger", EVENT_TIMEOUT)
    details = trigger["payload"]["custom_details"]
    assert trigger["routing_key"] == ROUTING_KEY
    assert trigger["payload"]["severity"] == "critical"
    assert trigger["payload"]["class"] == "SpecDecodeSpeedupBelowOne"
    assert details["model_name"] == MODEL
    assert details["runbook_url"].endswith("docs/runbook.md#specdecodespeedupbelowone")
    assert trigger["links"][0]["href"] == details["runbook_url"]
    assert "var-model=llama-e2e" in trigger["links"][1]["href"]
    assert "c = 0.3 (source: calibration" in details["alerts"]
    assert "a net loss" in trigger["payload"]["summary"]

    exporter.set_speedup(1.5)
    stack.stub.wait_for_event(
        lambda e: e["event_action"] == "resolve" and e["dedup_key"] == trigger["dedup_key"],
        EVENT_TIMEOUT,
    )

    exporter.set_acceptance(HEALTHY, 0.3)  # the model: 0.3, below t; s still 1.5
    low = stack.stub.wait_for_event(
        lambda e: (
            e["event_action"] == "trigger" and e["payload"]["class"] == "SpecDecodeAcceptanceLow"
        ),
        EVENT_TIMEOUT,
    )
    assert low["payload"]["severity"] == "critical"
    assert "still a gain (modelled speedup 1.50)" in low["payload"]["custom_details"]["alerts"]
    assert "c = 0.3 (source: calibration)" in low["payload"]["custom_details"]["alerts"]

    pages = [e["payload"]["class"] for e in stack.stub.events() if e["event_action"] == "trigger"]
    assert pages == ["SpecDecodeSpeedupBelowOne", "SpecDecodeAcceptanceLow"], "the two pages only"


def test_another_teams_critical_alert_goes_to_the_default_receiver(tmp_path: Path) -> None:
    with alerting(tmp_path) as (alertmanager, stub):
        _post_alerts(
            alertmanager,
            [
                {
                    "alertname": "KubePodCrashLooping",
                    "severity": "critical",
                    "namespace": "e2e",
                    "pod": "vllm-e2e-0",
                }
            ],
        )
        wait_until(
            lambda: bool(stub.posts("/default")),
            EVENT_TIMEOUT,
            "the other team's alert to reach the default receiver",
        )
        assert "KubePodCrashLooping" in json.dumps(stub.posts("/default")[0].body)
        assert stub.events() == [] and stub.posts("/chat") == []


def test_every_dashboard_query_and_rule_evaluates(stack: Stack) -> None:
    wait_until(lambda: bool(bucket_acceptance(stack.prometheus)), EVENT_TIMEOUT, "data")
    board = json.loads((stack.generated / "dashboards" / "vllm-specdec.json").read_text())
    groups = yaml.safe_load((stack.generated / "alerts" / "specdec-rules.yaml").read_text())

    report = evaluate(
        stack.prometheus.url,
        dashboard_expressions(board) + rule_expressions(groups["groups"]),
        WINDOW,
    )

    assert report.errors == []
    unexplained = [expr for expr in report.empty if not _may_be_empty(expr, groups["groups"])]
    assert unexplained == [], "queries over series the exporter serves must return data"
    assert len(report.with_data) > 40


def test_a_cluster_label_absent_from_the_series_still_shows_everything(stack: Stack) -> None:
    """Configured for Thanos/Mimir (`cluster_label = "cluster"`) but queried on a Prometheus
    whose series have no such label: the variables' All (`.*`) still matches them."""
    wait_until(lambda: bool(bucket_acceptance(stack.prometheus)), EVENT_TIMEOUT, "data")
    data = with_test_overrides(load(), rate_window=WINDOW).model_dump(by_alias=True)
    data["selectors"]["cluster_label"] = "cluster"
    board = dashboard(Settings.model_validate(data))
    groups = yaml.safe_load((stack.generated / "alerts" / "specdec-rules.yaml").read_text())

    report = evaluate(stack.prometheus.url, dashboard_expressions(board), WINDOW)

    assert report.errors == []
    assert any('cluster=~"$cluster"' in expr for expr in report.with_data)
    assert [e for e in report.empty if not _may_be_empty(e, groups["groups"])] == []


def _may_be_empty(expr: str, groups: list[dict[str, Any]]) -> bool:
    """vLLM's own series are not served by the fake, the stack has no data from a day ago, and
    an alert expression (or the annotation of firing alerts) is empty while its condition is
    false: that is its job."""
    is_alert = any(r.get("alert") and r["expr"] == expr for g in groups for r in g["rules"])
    return is_alert or "vllm:" in expr or " offset " in expr or expr.startswith("ALERTS{")


def test_a_down_sidecar_inhibits_only_its_own_pods_acceptance_alerts(tmp_path: Path) -> None:
    with alerting(tmp_path) as (alertmanager, _):
        pod_a = {"namespace": "e2e", "pod": "vllm-a", "instance": "10.0.0.1:10088"}
        pod_b = {"namespace": "e2e", "pod": "vllm-b", "instance": "10.0.0.2:10088"}
        _post_alerts(
            alertmanager,
            [
                {"alertname": "SpecDecodeSidecarDown", "severity": "warning", **pod_a},
                {
                    "alertname": "SpecDecodeAcceptanceLow",
                    "severity": "critical",
                    "model_name": MODEL,
                    **pod_a,
                },
                {
                    "alertname": "SpecDecodeAcceptanceLow",
                    "severity": "critical",
                    "model_name": MODEL,
                    **pod_b,
                },
            ],
        )
        wait_until(
            lambda: _inhibited_pods(alertmanager) == {"vllm-a"},
            EVENT_TIMEOUT,
            "pod a's acceptance alert, and only it, to be inhibited",
        )


def _post_alerts(alertmanager: Process, label_sets: list[dict[str, str]]) -> None:
    alerts = [{"labels": labels, "annotations": {"summary": "e2e"}} for labels in label_sets]
    httpx.post(alertmanager.url + "/api/v2/alerts", json=alerts, timeout=5.0).raise_for_status()


def _inhibited_pods(alertmanager: Process) -> set[str]:
    reply = httpx.get(alertmanager.url + "/api/v2/alerts", timeout=5.0)
    return {a["labels"]["pod"] for a in reply.json() if a["status"]["inhibitedBy"]}

"""Alertmanager routing: only our alerts (alertname SpecDecode*) reach our receivers, in the
standalone config, merged into a user's config, and as an AlertmanagerConfig under both
prometheus-operator set-ups; `amtool check-config` and `amtool config routes test` prove it. No
literal PagerDuty key, grouping without pod, the resource saying the same as the plain file."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from required_tools import require
from specdec_artifacts.alertmanager import (
    alertmanager_config_resource,
    merge_into,
    standalone_config,
    subtree,
)
from specdec_artifacts.outputs import ALERTMANAGER_FILE
from specdec_artifacts.rules import FLAT_WHILE_DOWN, INHIBITED_ALERTS, alerting_rules
from specdec_artifacts.settings import REPO_ROOT, Settings, load

COMMITTED = REPO_ROOT / ALERTMANAGER_FILE
PAGER, CHAT, DEFAULT = "specdec-pagerduty", "specdec-chat", "default"
USER_CONFIG: dict[str, Any] = {
    "route": {
        "receiver": "ops-tickets",
        "routes": [{"receiver": "ops-pager", "matchers": ['severity="critical"']}],
    },
    "receivers": [{"name": "ops-tickets"}, {"name": "ops-pager"}],
}
"""Another team's config: every critical alert to their pager, the rest to their tickets."""


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require("amtool")
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False, timeout=60)


def written(tmp_path: Path, config: dict[str, Any], name: str = "alertmanager.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def route_of(config: Path, *labels: str) -> str:
    result = amtool("config", "routes", "test", f"--config.file={config}", *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


@pytest.fixture
def standalone(tmp_path: Path) -> Path:
    return written(tmp_path, standalone_config(load()))


def test_amtool_check_config_of_the_standalone_and_the_merged_configs(
    tmp_path: Path, standalone: Path
) -> None:
    merged = written(tmp_path, merge_into(USER_CONFIG, subtree(load())), "merged.yml")
    for config in (standalone, merged):
        result = amtool("check-config", str(config))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


def test_the_committed_file_is_the_subtree_to_merge() -> None:
    committed = yaml.safe_load(COMMITTED.read_text())
    assert committed == subtree(load())
    assert set(committed) == {"routes", "receivers", "inhibit_rules"}
    assert "Not a whole Alertmanager config: merge it into yours" in COMMITTED.read_text()


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (
            [
                "severity=critical",
                "alertname=SpecDecodeAcceptanceLow",
                "model_name=llama",
                "namespace=llm",
            ],
            PAGER,
        ),
        (["severity=warning", "alertname=SpecDecodeVLLMNeverUp", "namespace=llm"], CHAT),
        (["severity=warning", "alertname=SpecDecodeBucketAcceptanceLow", "namespace=llm"], CHAT),
        (["severity=warning", "alertname=SpecDecodeProbeSplitOff", "namespace=llm"], CHAT),
        (["severity=warning", "alertname=SpecDecodeProbeErrors", "namespace=llm"], CHAT),
        (["severity=warning", "alertname=SpecDecodeProbeFilesUnreadable", "namespace=llm"], CHAT),
        (["alertname=SpecDecodeSomethingNew"], CHAT),
        # Another team's alerts, critical or not, never reach our receivers.
        (["alertname=KubePodCrashLooping", "severity=critical", "namespace=llm"], DEFAULT),
        (["alertname=HighLatency", "severity=warning"], DEFAULT),
    ],
)
def test_amtool_routes_only_our_alerts_to_our_receivers(
    standalone: Path, labels: list[str], receiver: str
) -> None:
    assert route_of(standalone, *labels) == receiver


@pytest.mark.parametrize("rule", alerting_rules(load()), ids=lambda r: r["alert"])
def test_each_shipped_alert_reaches_the_receiver_of_its_severity(
    standalone: Path, rule: dict[str, Any]
) -> None:
    """The two pages reach PagerDuty; every other alert, the monitor's health included, chat."""
    labels = [f"alertname={rule['alert']}", f"severity={rule['labels']['severity']}"]
    pages = {"SpecDecodeAcceptanceLow", "SpecDecodeSpeedupBelowOne"}
    assert route_of(standalone, *labels, "namespace=llm") == (
        PAGER if rule["alert"] in pages else CHAT
    )


def test_amtool_routes_test_rejects_a_wrong_receiver(standalone: Path) -> None:
    result = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={standalone}",
        f"--verify.receivers={PAGER}",
        "alertname=KubePodCrashLooping",
        "severity=critical",
    )
    assert result.returncode != 0


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=SpecDecodeAcceptanceLow", "severity=critical", "namespace=llm"], PAGER),
        (["alertname=SpecDecodeNotDrafting", "severity=warning", "namespace=llm"], CHAT),
        (["alertname=KubePodCrashLooping", "severity=critical", "namespace=llm"], "ops-pager"),
        (["alertname=HighLatency", "severity=warning"], "ops-tickets"),
    ],
)
def test_merged_into_a_config_whose_pager_takes_every_critical(
    tmp_path: Path, labels: list[str], receiver: str
) -> None:
    merged = written(tmp_path, merge_into(USER_CONFIG, subtree(load())))
    assert route_of(merged, *labels) == receiver


def operator_rendering(settings: Settings, namespace: str, strategy: str) -> dict[str, Any]:
    """What prometheus-operator makes of the AlertmanagerConfig in `namespace` under the global
    config (pkg/alertmanager/amcfg.go): its route first under the root with `continue: true`,
    a `namespace` matcher unless the strategy is None, receivers named namespace/name/receiver."""
    resource = alertmanager_config_resource(settings)
    prefix = f"{namespace}/{resource['metadata']['name']}/"

    def route(spec: dict[str, Any]) -> dict[str, Any]:
        matchers = [f'{m["name"]}{m["matchType"]}"{m["value"]}"' for m in spec["matchers"]]
        return {
            "receiver": prefix + spec["receiver"],
            "matchers": matchers,
            "routes": [route(child) for child in spec.get("routes", [])],
        }

    top = route(resource["spec"]["route"])
    top["continue"] = True
    if strategy == "OnNamespace":
        top["matchers"].append(f'namespace="{namespace}"')
    receivers = [{**r, "name": prefix + r["name"]} for r in subtree(settings)["receivers"]]
    return {
        "route": {"receiver": DEFAULT, "routes": [top]},
        "receivers": [{"name": DEFAULT}, *receivers],
    }


@pytest.mark.parametrize(
    ("strategy", "labels", "receiver"),
    [
        (
            "OnNamespace",
            ["alertname=SpecDecodeAcceptanceLow", "severity=critical", "namespace=llm"],
            f"llm/specdec/{PAGER}",
        ),
        (
            "OnNamespace",
            ["alertname=KubePodCrashLooping", "severity=critical", "namespace=llm"],
            DEFAULT,
        ),
        # The default strategy scopes the resource to its namespace: one per workload namespace.
        (
            "OnNamespace",
            ["alertname=SpecDecodeAcceptanceLow", "severity=critical", "namespace=ml"],
            DEFAULT,
        ),
        (
            "None",
            ["alertname=SpecDecodeAcceptanceLow", "severity=critical", "namespace=ml"],
            f"llm/specdec/{PAGER}",
        ),
        ("None", ["alertname=KubePodCrashLooping", "severity=critical", "namespace=ml"], DEFAULT),
    ],
)
def test_the_alertmanager_config_under_both_operator_strategies(
    tmp_path: Path, strategy: str, labels: list[str], receiver: str
) -> None:
    rendered = written(tmp_path, operator_rendering(load(), "llm", strategy))
    assert amtool("check-config", str(rendered)).returncode == 0
    assert route_of(rendered, *labels) == receiver


def test_pages_are_grouped_per_model_and_namespace_never_per_pod() -> None:
    route = subtree(load())["routes"][0]
    assert route["group_by"] == ["namespace", "model_name"]


def test_a_cluster_label_joins_the_grouping_and_the_inhibition() -> None:
    data = load().model_dump(by_alias=True)
    data["selectors"]["cluster_label"] = "cluster"
    ours = subtree(Settings.model_validate(data))
    assert ours["routes"][0]["group_by"] == ["namespace", "model_name", "cluster"]
    assert ours["inhibit_rules"][0]["equal"] == ["namespace", "pod", "instance", "cluster"]


def test_pagerduty_uses_events_v2_with_a_key_file_and_links() -> None:
    receivers = {r["name"]: r for r in subtree(load())["receivers"]}
    pagerduty = receivers[PAGER]["pagerduty_configs"][0]
    assert "routing_key" not in pagerduty and "service_key" not in pagerduty
    assert pagerduty["routing_key_file"].startswith("/etc/alertmanager/secrets/")
    assert pagerduty["url"] == "https://events.pagerduty.com/v2/enqueue"
    assert pagerduty["send_resolved"] is True
    assert {"runbook_url", "dashboard_url", "model_name", "namespace"} <= set(pagerduty["details"])
    assert [link["text"] for link in pagerduty["links"]] == ["Runbook", "Dashboard"]
    for mapped in ('"warning" }}warning', '"info" }}info', "{{ else }}critical"):
        assert mapped in pagerduty["severity"]


def test_the_committed_file_holds_no_secret() -> None:
    text = COMMITTED.read_text()
    assert "routing_key:" not in text and "api_url:" not in text


def test_the_resource_routes_like_the_plain_file() -> None:
    settings = load()
    plain, resource = subtree(settings), alertmanager_config_resource(settings)
    spec, route = resource["spec"], plain["routes"][0]
    assert resource["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    assert spec["route"]["groupBy"] == route["group_by"]

    def matchers(node: dict[str, Any]) -> list[str]:
        return [f'{m["name"]}{m["matchType"]}"{m["value"]}"' for m in node["matchers"]]

    assert matchers(spec["route"]) == route["matchers"] == ['alertname=~"SpecDecode.*"']
    assert [r["receiver"] for r in spec["route"]["routes"]] == [
        r["receiver"] for r in route["routes"]
    ]
    assert [m for r in spec["route"]["routes"] for m in matchers(r)] == [
        m for r in route["routes"] for m in r["matchers"]
    ]
    assert spec["inhibitRules"][0]["equal"] == plain["inhibit_rules"][0]["equal"]
    pagerduty = spec["receivers"][0]["pagerdutyConfigs"][0]
    assert pagerduty["routingKey"] == {"name": "specdec-pagerduty", "key": "routing-key"}
    assert pagerduty["severity"] == plain["receivers"][0]["pagerduty_configs"][0]["severity"]


def test_inhibition_targets_only_per_pod_alerts_on_the_same_pod() -> None:
    rule = subtree(load())["inhibit_rules"][0]
    assert "instance" in rule["equal"] and "pod" in rule["equal"]
    assert "SpecDecodeAcceptanceDropped" not in rule["target_matchers"][0]
    assert "SpecDecodeSidecarDown" in rule["source_matchers"][0]
    assert "SpecDecodeVLLMNeverUp" in rule["source_matchers"][0]
    per_pod = {
        r["alert"]
        for r in alerting_rules(load())
        if "pod" in r["annotations"]["dashboard_url"]
        and r["alert"] not in rule["source_matchers"][0]
        and r["alert"] not in FLAT_WHILE_DOWN  # their rates go flat by themselves (docs)
    }
    assert per_pod == set(INHIBITED_ALERTS), "a per-pod alert the down alerts do not mute"
    assert yaml.safe_load(COMMITTED.read_text())["inhibit_rules"] == [rule]

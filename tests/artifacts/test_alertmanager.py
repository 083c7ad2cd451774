"""Alertmanager routing: `amtool check-config`, `amtool config routes test` for both severities,
no literal PagerDuty key, grouping without pod, and the AlertmanagerConfig resource saying the
same as the plain file."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from required_tools import require
from specdec_artifacts.alertmanager import alertmanager_config_resource, plain_config
from specdec_artifacts.outputs import ALERTMANAGER_FILE
from specdec_artifacts.settings import REPO_ROOT, load

CONFIG = REPO_ROOT / ALERTMANAGER_FILE


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require("amtool")
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False,
                          timeout=60)


def test_amtool_check_config() -> None:
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(("labels", "receiver"), [
    (["severity=critical", "alertname=SpecDecodeAcceptanceLow", "model_name=llama",
      "namespace=llm"], "specdec-pagerduty"),
    (["severity=critical", "alertname=SpecDecodeSidecarDown", "namespace=llm"],
     "specdec-pagerduty"),
    (["severity=warning", "alertname=SpecDecodeSpeedupBelowOne", "model_name=llama",
      "namespace=llm"], "specdec-chat"),
    (["alertname=SpecDecodeSomethingNew"], "specdec-chat"),
])
def test_amtool_routes(labels: list[str], receiver: str) -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    f"--verify.receivers={receiver}", *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_amtool_routes_test_rejects_a_wrong_receiver() -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    "--verify.receivers=specdec-pagerduty", "severity=warning")
    assert result.returncode != 0


def test_pages_are_grouped_per_model_and_namespace_never_per_pod() -> None:
    route = plain_config(load())["route"]
    assert route["group_by"] == ["namespace", "model_name"]


def test_pagerduty_uses_events_v2_with_a_key_file_and_links() -> None:
    receivers = {r["name"]: r for r in plain_config(load())["receivers"]}
    pagerduty = receivers["specdec-pagerduty"]["pagerduty_configs"][0]
    assert "routing_key" not in pagerduty and "service_key" not in pagerduty
    assert pagerduty["routing_key_file"].startswith("/etc/alertmanager/secrets/")
    assert pagerduty["url"] == "https://events.pagerduty.com/v2/enqueue"
    assert pagerduty["send_resolved"] is True
    assert {"runbook_url", "dashboard_url", "model_name", "namespace"} <= set(
        pagerduty["details"])
    assert [link["text"] for link in pagerduty["links"]] == ["Runbook", "Dashboard"]
    for mapped in ('"warning" }}warning', '"info" }}info', "{{ else }}critical"):
        assert mapped in pagerduty["severity"]


def test_the_committed_file_holds_no_secret() -> None:
    text = CONFIG.read_text()
    assert "routing_key:" not in text and "api_url:" not in text


def test_the_resource_routes_like_the_plain_file() -> None:
    settings = load()
    plain, resource = plain_config(settings), alertmanager_config_resource(settings)
    spec = resource["spec"]
    assert resource["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    assert spec["route"]["groupBy"] == plain["route"]["group_by"]
    assert [r["receiver"] for r in spec["route"]["routes"]] == \
        [r["receiver"] for r in plain["route"]["routes"]]
    assert [f'{m["name"]}="{m["value"]}"' for r in spec["route"]["routes"]
            for m in r["matchers"]] == [m for r in plain["route"]["routes"] for m in r["matchers"]]
    assert spec["inhibitRules"][0]["equal"] == plain["inhibit_rules"][0]["equal"]
    pagerduty = spec["receivers"][0]["pagerdutyConfigs"][0]
    assert pagerduty["routingKey"] == {"name": "specdec-pagerduty", "key": "routing-key"}
    assert pagerduty["severity"] == plain["receivers"][0]["pagerduty_configs"][0]["severity"]


def test_inhibition_targets_only_per_pod_alerts_on_the_same_pod() -> None:
    rule = plain_config(load())["inhibit_rules"][0]
    assert "instance" in rule["equal"] and "pod" in rule["equal"]
    assert "SpecDecodeAcceptanceDropped" not in rule["target_matchers"][0]
    assert "SpecDecodeSidecarDown" in rule["source_matchers"][0]
    assert yaml.safe_load(CONFIG.read_text())["inhibit_rules"] == [rule]

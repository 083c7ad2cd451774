"""The rule file: `promtool check rules` and `promtool test rules` pass, the unit tests cover every
alert (firing and silent) and every recording rule, and each alert is annotated and documented."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from required_tools import require
from specdec_artifacts.checks import rule_problems
from specdec_artifacts.outputs import RULES_FILE
from specdec_artifacts.rules import alerting_rules, record_names, rule_groups
from specdec_artifacts.settings import REPO_ROOT, load

RULES = REPO_ROOT / RULES_FILE
RULE_TESTS = sorted((REPO_ROOT / "alerts" / "tests").glob("*.test.yaml"))
RUNBOOK = REPO_ROOT / "docs" / "runbook.md"
RECORD_NAME = re.compile(r"^[a-z_]+:[a-z_]+:[a-z0-9_]+$")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require("promtool")
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False,
                          timeout=120)


def unit_tests() -> list[dict[str, Any]]:
    return [test for path in RULE_TESTS for test in yaml.safe_load(path.read_text())["tests"]]


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(test_file: Path) -> None:
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules_can_fail(tmp_path: Path) -> None:
    """A wrong expectation must fail: the unit tests are not vacuous."""
    source = (REPO_ROOT / "alerts" / "tests" / "recording.test.yaml").read_text()
    broken = source.replace("value: 0.375", "value: 0.5625").replace(
        "../specdec-rules.yaml", str(RULES))
    assert broken != source
    (tmp_path / "broken.test.yaml").write_text(broken)

    result = promtool("test", "rules", str(tmp_path / "broken.test.yaml"))

    assert result.returncode != 0


def test_every_alert_has_a_firing_case_and_a_silent_case() -> None:
    firing, silent = set(), set()
    for test in unit_tests():
        for case in test.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else silent).add(case["alertname"])
    alerts = {rule["alert"] for rule in alerting_rules(load())}
    assert alerts - firing == set(), "alerts never shown to fire"
    assert alerts - silent == set(), "alerts never shown to stay silent"


def test_every_firing_case_checks_labels_and_all_annotations() -> None:
    for test in unit_tests():
        for case in test.get("alert_rule_test", []):
            for alert in case["exp_alerts"]:
                assert alert["exp_labels"]["severity"] in ("critical", "warning")
                assert set(alert["exp_annotations"]) == {
                    "summary", "description", "runbook_url", "dashboard_url"}, test["name"]


def test_every_recording_rule_has_a_test() -> None:
    tested = " ".join(case["expr"] for test in unit_tests()
                      for case in test.get("promql_expr_test", []))
    untested = {name for name in record_names(rule_groups(load()))
                if not re.search(re.escape(name) + r"\b", tested)}
    assert untested == set()


def test_recording_rules_are_named_level_metric_operation() -> None:
    bad = [n for n in record_names(rule_groups(load())) if not RECORD_NAME.match(n)]
    assert bad == []


def test_rule_expressions_stay_in_the_contract_and_are_guarded() -> None:
    assert rule_problems(rule_groups(load())) == []


def test_thresholds_come_from_the_config() -> None:
    settings = load()
    stricter = replace(settings, thresholds=replace(settings.thresholds, acceptance_rate=0.65))
    expr = {r["alert"]: r["expr"] for r in alerting_rules(stricter)}["SpecDecodeAcceptanceLow"]
    assert "< 0.65" in expr


def test_every_alert_is_labelled_annotated_and_links_its_runbook_section() -> None:
    runbook = RUNBOOK.read_text()
    for rule in alerting_rules(load()):
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["runbook_url"].endswith(f"docs/runbook.md#{name.lower()}")
        assert "{{ $labels." in rule["annotations"]["description"] or name.endswith("Absent")
        section = runbook_section(runbook, name)
        for heading in ("Meaning", "Impact", "Diagnosis", "Mitigation"):
            assert f"**{heading}**" in section, f"{name}: no {heading} in the runbook"


def runbook_section(runbook: str, alertname: str) -> str:
    match = re.search(rf"^## {alertname}\n(.*?)(?=^## |\Z)", runbook, re.MULTILINE | re.DOTALL)
    assert match, f"docs/runbook.md has no '## {alertname}' section"
    return match.group(1)


def test_critical_alerts_are_the_paging_ones() -> None:
    severities = {r["alert"]: r["labels"]["severity"] for r in alerting_rules(load())}
    assert {n for n, s in severities.items() if s == "critical"} == {
        "SpecDecodeAcceptanceLow", "SpecDecodeBucketAcceptanceLow", "SpecDecodeSidecarDown",
        "SpecDecodeVLLMUnreachable"}

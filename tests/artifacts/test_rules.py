"""The rule file: `promtool check rules` and `promtool test rules` pass, the unit tests cover every
alert (firing and silent) and every recording rule, thresholds per method and model work, the
hysteresis is what keeps a wobble one incident, and each alert is annotated and documented."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from required_tools import require
from specdec_artifacts.checks import rule_problems
from specdec_artifacts.outputs import RULES_FILE, to_yaml
from specdec_artifacts.rules import alerting_rules, record_names, rule_groups
from specdec_artifacts.settings import REPO_ROOT, Settings, load

RULES = REPO_ROOT / RULES_FILE
RULE_TESTS = sorted((REPO_ROOT / "alerts" / "tests").glob("*.test.yaml"))
OVERRIDES_TEST = Path(__file__).parent / "promtool" / "threshold-overrides.test.yaml"
RUNBOOK = REPO_ROOT / "docs" / "runbook.md"
RECORD_NAME = re.compile(r"^[a-z_]+:[a-z_]+:[a-z0-9_]+$")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require("promtool")
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False, timeout=120)


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
        "../specdec-rules.yaml", str(RULES)
    )
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
                    "summary",
                    "description",
                    "runbook_url",
                    "dashboard_url",
                }, test["name"]


def test_every_recording_rule_has_a_test() -> None:
    tested = " ".join(
        case["expr"] for test in unit_tests() for case in test.get("promql_expr_test", [])
    )
    untested = {
        name
        for name in record_names(rule_groups(load()))
        if not re.search(re.escape(name) + r"\b", tested)
    }
    assert untested == set()


def test_recording_rules_are_named_level_metric_operation() -> None:
    bad = [n for n in record_names(rule_groups(load())) if not RECORD_NAME.match(n)]
    assert bad == []


def test_rule_expressions_stay_in_the_contract_and_are_guarded() -> None:
    assert rule_problems(rule_groups(load())) == []


def changed(settings: Settings, table: str, **values: Any) -> Settings:
    data = settings.model_dump(by_alias=True)
    data[table].update(values)
    return Settings.model_validate(data)


def rules_file(tmp_path: Path, settings: Settings) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(to_yaml({"groups": rule_groups(settings)}))
    return path


def run_test_file(tmp_path: Path, test_file: Path, rules: Path) -> subprocess.CompletedProcess[str]:
    text = (
        test_file.read_text()
        .replace("  - RULES\n", f"  - {rules}\n")
        .replace("  - ../specdec-rules.yaml\n", f"  - {rules}\n")
    )
    copy = tmp_path / test_file.name
    copy.write_text(text)
    return promtool("test", "rules", str(copy))


def test_thresholds_per_method_and_per_model(tmp_path: Path) -> None:
    settings = changed(
        load(),
        "thresholds",
        acceptance_rate_by_method={"ngram": 0.3},
        acceptance_rate_by_model={"llama": 0.45},
    )
    result = run_test_file(tmp_path, OVERRIDES_TEST, rules_file(tmp_path, settings))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_override_test_fails_without_the_overrides(tmp_path: Path) -> None:
    result = run_test_file(tmp_path, OVERRIDES_TEST, rules_file(tmp_path, load()))
    assert result.returncode != 0


def test_without_keep_firing_for_the_wobble_would_be_two_incidents(tmp_path: Path) -> None:
    """Mutation: the hysteresis test must fail when the hysteresis is removed."""
    settings = load()
    data = settings.model_dump(by_alias=True)
    for policy in data["alerts"].values():
        policy["keep_firing_for"] = None
    result = run_test_file(
        tmp_path,
        REPO_ROOT / "alerts" / "tests" / "acceptance.test.yaml",
        rules_file(tmp_path, Settings.model_validate(data)),
    )
    assert result.returncode != 0
    assert "time: 26m" in result.stderr


def test_the_startup_grace_is_the_never_up_alerts_for(tmp_path: Path) -> None:
    """Mutation: a 10-minute grace would page during vLLM's 15-minute start."""
    data = load().model_dump(by_alias=True)
    data["alerts"]["SpecDecodeVLLMNeverUp"]["for"] = "10m"
    result = run_test_file(
        tmp_path,
        REPO_ROOT / "alerts" / "tests" / "health.test.yaml",
        rules_file(tmp_path, Settings.model_validate(data)),
    )
    assert result.returncode != 0
    assert "SpecDecodeVLLMNeverUp, time: 19m" in result.stderr


def test_every_alert_is_ours_by_name() -> None:
    assert all(rule["alert"].startswith("SpecDecode") for rule in alerting_rules(load()))


NET_LOSS = re.compile(r"(?<!not )a net loss|slower than|slowed down")


def test_only_the_measured_speedup_page_claims_a_net_loss() -> None:
    """The acceptance page says "a net loss" only in the branch its query of s < 1 selects; the
    assumed-cost ticket says it depends on c."""
    claims = {
        rule["alert"]
        for rule in alerting_rules(load())
        if NET_LOSS.search(rule["annotations"]["summary"])
        or NET_LOSS.search(rule["annotations"]["description"].replace("{{ else }}", "\n"))
    }
    assert claims == {"SpecDecodeSpeedupBelowOne", "SpecDecodeAcceptanceLow"}
    low = next(r for r in alerting_rules(load()) if r["alert"] == "SpecDecodeAcceptanceLow")
    assert (
        "{{ if lt (. | first | value) 1.0 }}a net loss{{ else }}still a gain{{ end }}"
        in (low["annotations"]["description"])
    )


def test_the_acceptance_page_has_no_unless() -> None:
    """One alert for a < t whatever s says: nothing in its expression can silence it."""
    low = next(r for r in alerting_rules(load()) if r["alert"] == "SpecDecodeAcceptanceLow")
    assert "unless" not in low["expr"]
    assert "specdec_estimated_speedup" not in low["expr"]


def test_the_acceptance_alerts_state_a_t_s_and_c() -> None:
    rules = {rule["alert"]: rule for rule in alerting_rules(load())}
    low = rules["SpecDecodeAcceptanceLow"]["annotations"]["description"]
    for figure in (
        "$value | humanizePercentage",
        "specdec_acceptance_threshold:config",
        "specdec_estimated_speedup{",
        "specdec_draft_cost_ratio{",
        'label "source"',
    ):
        assert figure in low, figure
    for name in ("SpecDecodeSpeedupBelowOne", "SpecDecodeSpeedupBelowOneAssumedCost"):
        speedup = rules[name]["annotations"]["description"]
        for figure in (
            '$value | printf "%.2f"',
            "specdec_acceptance_rate:ratio_rate5m{",
            "specdec_acceptance_threshold:config",
            "specdec_draft_cost_ratio{",
            'label "source"',
        ):
            assert figure in speedup, (name, figure)


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


def test_exactly_two_alerts_page() -> None:
    """Acceptance below t, and a modelled net loss on a measured or set c; every other alert is a
    ticket (the monitor's own health included: vLLM's availability is paged elsewhere)."""
    severities = {r["alert"]: r["labels"]["severity"] for r in alerting_rules(load())}
    assert {n for n, s in severities.items() if s == "critical"} == {
        "SpecDecodeAcceptanceLow",
        "SpecDecodeSpeedupBelowOne",
    }


def test_the_runbook_words_match_each_severity() -> None:
    """Each runbook section's meaning says "A **page** (critical" or "A **ticket** (warning", as
    its rule's severity, and never the other."""
    runbook = RUNBOOK.read_text()
    words = {"critical": "page", "warning": "ticket"}
    for rule in alerting_rules(load()):
        section = runbook_section(runbook, rule["alert"]).split("**Impact**")[0]
        meaning = " ".join(section.split())
        severity = rule["labels"]["severity"]
        (other,) = set(words) - {severity}
        assert f"A **{words[severity]}** ({severity}" in meaning, rule["alert"]
        assert f"A **{words[other]}**" not in meaning, rule["alert"]


def test_bucket_alerts_ticket_by_default_and_can_page() -> None:
    settings = load()
    assert settings.alerts["SpecDecodeBucketAcceptanceLow"].severity == "warning"
    data = settings.model_dump(by_alias=True)
    data["alerts"]["SpecDecodeBucketAcceptanceLow"]["severity"] = "critical"
    paging = {r["alert"]: r for r in alerting_rules(Settings.model_validate(data))}
    assert paging["SpecDecodeBucketAcceptanceLow"]["labels"]["severity"] == "critical"


def test_with_a_cluster_label_rules_aggregate_per_cluster_and_links_carry_it() -> None:
    data = load().model_dump(by_alias=True)
    data["selectors"]["cluster_label"] = "cluster"
    settings = Settings.model_validate(data)
    groups = rule_groups(settings)
    assert rule_problems(groups, ("cluster",)) == []
    fleet = next(
        r
        for g in groups
        for r in g["rules"]
        if r.get("record") == "namespace_model_name:specdec_acceptance_rate:ratio_rate5m"
    )
    assert fleet["expr"].startswith("sum by (cluster, namespace, model_name)")
    low = next(r for r in alerting_rules(settings) if r["alert"] == "SpecDecodeAcceptanceLow")
    assert (
        "?var-cluster={{ $labels.cluster | urlquery }}&var-namespace="
        in (low["annotations"]["dashboard_url"])
    )
    assert "cluster=%q" in low["annotations"]["description"]

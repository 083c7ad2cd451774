"""tools/generate.py: committed files are current, staleness is reported readably, the config
is validated (pydantic models, one readable line), the test variant shortens `for`, hysteresis
and windows, and the Alertmanager merge prints a merged config."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from specdec_artifacts import outputs
from specdec_artifacts.checks import stale_outputs
from specdec_artifacts.rules import alerting_rules, threshold_expr
from specdec_artifacts.settings import (
    CONFIG_PATH,
    REPO_ROOT,
    SettingsError,
    load,
    with_test_overrides,
)

GENERATE = REPO_ROOT / "tools" / "generate.py"


def run_generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATE), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def write_config(tmp_path: Path, old: str, new: str) -> Path:
    text = CONFIG_PATH.read_text()
    assert old in text
    path = tmp_path / "config.toml"
    path.write_text(text.replace(old, new))
    return path


def test_committed_generated_files_are_up_to_date() -> None:
    result = run_generate("--check")
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_check_fails_naming_the_stale_file_when_the_config_changes(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, "min_draft_tokens_per_second = 10.0 ", "min_draft_tokens_per_second = 12.0 "
    )

    result = run_generate("--check", "--config", str(config))

    assert result.returncode == 1
    assert "Run `python tools/generate.py`" in result.stderr
    assert "alerts/specdec-rules.yaml: stale" in result.stderr
    assert "+      instance_model_name:specdec_draft_tokens:rate5m >= 12" in result.stderr


def test_stale_outputs_reports_an_edited_and_a_missing_file(tmp_path: Path) -> None:
    generated = outputs.all_outputs(load())
    outputs.write(generated, tmp_path)
    (tmp_path / outputs.DASHBOARD_FILE).write_text("{}\n")
    (tmp_path / outputs.ALERTMANAGER_FILE).unlink()

    problems = stale_outputs(generated, tmp_path)

    assert [p.splitlines()[0] for p in problems] == [
        f"{outputs.ALERTMANAGER_FILE}: missing (never generated)",
        f"{outputs.DASHBOARD_FILE}: stale",
    ]


def test_a_fresh_copy_has_no_stale_outputs(tmp_path: Path) -> None:
    generated = outputs.all_outputs(load())
    outputs.write(generated, tmp_path)
    assert stale_outputs(generated, tmp_path) == []


def test_test_variant_shortens_for_windows_and_group_timing(tmp_path: Path) -> None:
    result = run_generate(
        "--out-dir", str(tmp_path), "--for", "5s", "--rate-window", "15s", "--group-timing", "1s"
    )
    assert result.returncode == 0, result.stderr

    groups = yaml.safe_load((tmp_path / outputs.RULES_FILE).read_text())["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert {a["for"] for a in alerts} == {"5s"}
    assert {a.get("keep_firing_for") for a in alerts} == {"5s", None}
    records = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    assert "[15s]" in records["instance_model_name:specdec_draft_tokens:rate15s"]
    assert alerts[0]["expr"].startswith("instance_model_name:specdec_acceptance_rate:ratio_rate15s")
    route = yaml.safe_load((tmp_path / outputs.ALERTMANAGER_FILE).read_text())["routes"][0]
    assert (route["group_wait"], route["group_interval"]) == ("1s", "1s")


def test_test_options_need_an_out_dir() -> None:
    result = run_generate("--for", "5s")
    assert result.returncode == 2
    assert "need --out-dir" in result.stderr


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'severity = "critical"  # "warning"',
            'severity = "page"  # "warning"',
            "alerts.SpecDecodeAcceptanceLow.severity: Input should be 'critical' or 'warning'",
        ),
        ('for = "10m"', 'for = "10 minutes"', "not a Prometheus duration: '10 minutes'"),
        (
            'group_by = ["namespace", "model_name"]',
            'group_by = ["namespace", "pod"]',
            "alertmanager.group_by: must not contain pod",
        ),
        ('rate = "5m"', 'rates = "5m"', "windows.rate: missing key"),
        (
            "acceptance_rate = 0.5\n",
            "acceptance_rate = 0.6\n",
            "thresholds.acceptance_rate: must equal the verdict's threshold 0.5",
        ),
        (
            "[thresholds.acceptance_rate_by_method]\n",
            "[thresholds.acceptance_rate_by_method]\nngram = 1.5\n",
            "thresholds.acceptance_rate_by_method.ngram: Input should be less than",
        ),
        (
            'cluster_label = ""',
            'cluster_label = "k8s cluster"',
            "selectors.cluster_label: String should match pattern",
        ),
        (
            'method = "ngram", ',
            "",
            "example_deployment.speculative_config: needs a string `method`",
        ),
        (
            'runbook = "https://runbook.unset.invalid/docs/runbook.md"',
            'runbook = "https://wiki.example.org/runbooks#specdec"',
            "links.runbook: must not contain '#'",
        ),
    ],
)
def test_a_bad_config_is_one_readable_line(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    config = write_config(tmp_path, old, new)

    with pytest.raises(SettingsError, match=re.escape(message)):
        load(config)
    result = run_generate("--check", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert message in result.stderr


def test_an_unknown_key_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path, "[links]\n", "[links]\nrunbok = 'x'\n")
    with pytest.raises(SettingsError, match=r"links.runbok: Extra inputs are not permitted"):
        load(config)


def test_every_alert_in_the_config_has_a_rule_and_back() -> None:
    configured = set(tomllib.loads(CONFIG_PATH.read_text())["alerts"])
    assert {rule["alert"] for rule in alerting_rules(load())} == configured


def test_overrides_leave_thresholds_and_severities_alone() -> None:
    settings = load()
    fast = with_test_overrides(settings, for_="3s", rate_window="10s")
    assert fast.thresholds == settings.thresholds
    assert {n: p.severity for n, p in fast.alerts.items()} == {
        n: p.severity for n, p in settings.alerts.items()
    }
    assert fast.alerts["SpecDecodeAcceptanceLow"].keep_firing_for == "3s"
    assert fast.alerts["SpecDecodeNotDrafting"].keep_firing_for is None
    with pytest.raises(SettingsError, match="not a Prometheus duration"):
        with_test_overrides(settings, for_="soon")


def test_merge_into_prints_the_users_config_with_our_routing_first(tmp_path: Path) -> None:
    theirs = {
        "route": {
            "receiver": "ops",
            "routes": [{"receiver": "ops-pager", "matchers": ['severity="critical"']}],
        },
        "receivers": [{"name": "ops"}, {"name": "ops-pager"}],
    }
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(theirs))

    result = run_generate("--merge-into", str(path))

    assert result.returncode == 0, result.stderr
    merged = yaml.safe_load(result.stdout)
    assert [r["receiver"] for r in merged["route"]["routes"]] == ["specdec-chat", "ops-pager"]
    assert [r["name"] for r in merged["receivers"]] == [
        "ops",
        "ops-pager",
        "specdec-pagerduty",
        "specdec-chat",
    ]
    assert len(merged["inhibit_rules"]) == 1


def test_merge_into_refuses_a_receiver_name_already_taken(tmp_path: Path) -> None:
    path = tmp_path / "alertmanager.yml"
    path.write_text(
        yaml.safe_dump(
            {"route": {"receiver": "specdec-chat"}, "receivers": [{"name": "specdec-chat"}]}
        )
    )
    result = run_generate("--merge-into", str(path))
    assert result.returncode == 2
    assert "receiver names already used in the config: specdec-chat" in result.stderr


CALIBRATED = """
[calibration.models."tiny-llama"]
break_even_acceptance_rate = 0.8113
draft_cost_ratio = 0.8113
[calibration.models."hand/set"]
break_even_acceptance_rate = 0.7
draft_cost_ratio = 0.7
"""


def test_a_measured_break_even_is_the_models_t_unless_one_is_set_by_hand(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        "[thresholds.acceptance_rate_by_model]\n",
        '[thresholds.acceptance_rate_by_model]\n"hand/set" = 0.45\n',
    )
    config.write_text(config.read_text() + CALIBRATED)
    expr = threshold_expr(load(config))
    assert "0.8113 * group without (method) (specdec_speculative_info{" in expr
    assert 'model_name="tiny-llama"' in expr
    assert "0.45 * group" in expr and "0.7 * group" not in expr


def test_a_break_even_above_1_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path, "[links]\n", "[links]\n")
    config.write_text(config.read_text() + CALIBRATED.replace("0.8113\ndraft", "1.2\ndraft", 1))
    with pytest.raises(SettingsError, match="break_even_acceptance_rate"):
        load(config)

"""tools/generate.py: committed files are current, staleness is reported readably, the config
is validated, and the test variant shortens `for` and windows."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from specdec_artifacts import outputs
from specdec_artifacts.checks import stale_outputs
from specdec_artifacts.rules import alerting_rules
from specdec_artifacts.settings import (
    CONFIG_PATH,
    REPO_ROOT,
    SettingsError,
    load,
    with_test_overrides,
)

GENERATE = REPO_ROOT / "tools" / "generate.py"


def run_generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATE), *args], capture_output=True, text=True,
                          check=False, timeout=60)


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
    config = write_config(tmp_path, "acceptance_rate = 0.5 ", "acceptance_rate = 0.6 ")

    result = run_generate("--check", "--config", str(config))

    assert result.returncode == 1
    assert "Run `python tools/generate.py`" in result.stderr
    assert "alerts/specdec-rules.yaml: stale" in result.stderr
    assert "+      instance_model_name:specdec_acceptance_rate:ratio_rate5m < 0.6" in result.stderr


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
    result = run_generate("--out-dir", str(tmp_path), "--for", "5s", "--rate-window", "15s",
                          "--group-timing", "1s")
    assert result.returncode == 0, result.stderr

    groups = yaml.safe_load((tmp_path / outputs.RULES_FILE).read_text())["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert {a["for"] for a in alerts} == {"5s"}
    records = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    assert "[15s]" in records["instance_model_name:specdec_draft_tokens:rate15s"]
    assert alerts[0]["expr"].startswith("instance_model_name:specdec_acceptance_rate:ratio_rate15s")
    route = yaml.safe_load((tmp_path / outputs.ALERTMANAGER_FILE).read_text())["route"]
    assert (route["group_wait"], route["group_interval"]) == ("1s", "1s")


def test_test_options_need_an_out_dir() -> None:
    result = run_generate("--for", "5s")
    assert result.returncode == 2
    assert "need --out-dir" in result.stderr


@pytest.mark.parametrize(("old", "new", "message"), [
    ('severity = "critical"\nfor = "10m"', 'severity = "page"\nfor = "10m"',
     "severity must be critical or warning"),
    ('for = "10m"', 'for = "10 minutes"', "not a Prometheus duration"),
    ('group_by = ["namespace", "model_name"]', 'group_by = ["namespace", "pod"]',
     "must not contain pod"),
    ('rate = "5m"', 'rates = "5m"', "missing key 'rate'"),
])
def test_a_bad_config_is_one_readable_line(tmp_path: Path, old: str, new: str,
                                           message: str) -> None:
    config = write_config(tmp_path, old, new)

    with pytest.raises(SettingsError, match=message):
        load(config)
    result = run_generate("--check", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert message.split("'", maxsplit=1)[0] in result.stderr


def test_every_alert_in_the_config_has_a_rule_and_back() -> None:
    configured = set(tomllib.loads(CONFIG_PATH.read_text())["alerts"])
    assert {rule["alert"] for rule in alerting_rules(load())} == configured


def test_overrides_leave_thresholds_and_severities_alone() -> None:
    settings = load()
    fast = with_test_overrides(settings, for_="3s", rate_window="10s")
    assert fast.thresholds == settings.thresholds
    assert {n: p.severity for n, p in fast.alerts.items()} == \
        {n: p.severity for n, p in settings.alerts.items()}

"""mixin/mixin.libsonnet, rendered by the jsonnet command (Debian's `jsonnet`): with its default
_config it is the shipped rule file and dashboard; with an overridden threshold, selector and
cluster label it is what the generator writes from the same values in alerts/config.toml, and
only what those values touch changes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from required_tools import require
from specdec_artifacts import mixin
from specdec_artifacts.dashboard import dashboard
from specdec_artifacts.outputs import DASHBOARD_FILE, MIXIN_FILE, RULES_FILE
from specdec_artifacts.rules import rule_groups
from specdec_artifacts.settings import REPO_ROOT, Settings, load

OVERRIDE = """{
  _config+:: {
    sidecarJob: 'sd',
    clusterLabel: 'k8s_cluster',
    thresholds+: { coverageRatio: 0.7 },
  },
}"""


def render(override: str = "{}") -> dict[str, Any]:
    """The mixin's rules (recording, then alerts) and dashboard, as jsonnet evaluates them."""
    program = (
        f"local m = (import '{MIXIN_FILE}') + {override};\n"
        "{groups: m.prometheusRules.groups + m.prometheusAlerts.groups,\n"
        f" dashboard: m.grafanaDashboards['{mixin.DASHBOARD_KEY}']}}"
    )
    result = subprocess.run(
        [require("jsonnet"), "--jpath", str(REPO_ROOT), "--exec", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rendered: dict[str, Any] = json.loads(result.stdout)
    return rendered


def generated(settings: Settings) -> dict[str, Any]:
    return {"groups": rule_groups(settings), "dashboard": dashboard(settings)}


def overridden_settings() -> Settings:
    data = load().model_dump(by_alias=True)
    data["selectors"].update(sidecar_job="sd", cluster_label="k8s_cluster")
    data["thresholds"]["coverage_ratio"] = 0.7
    return Settings.model_validate(data)


def leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, str(index)))
    else:
        yield path, value


def test_with_the_default_config_it_is_the_shipped_rules_and_dashboard() -> None:
    rendered = render()
    assert rendered["groups"] == yaml.safe_load((REPO_ROOT / RULES_FILE).read_text())["groups"]
    assert rendered["dashboard"] == json.loads((REPO_ROOT / DASHBOARD_FILE).read_text())


def test_an_override_gives_what_the_generator_writes_from_the_same_config() -> None:
    assert render(OVERRIDE) == generated(overridden_settings())


def test_an_override_changes_only_what_those_values_touch() -> None:
    cluster_variable = ("dashboard", "templating", "list", "1")
    before, after = dict(leaves(render())), dict(leaves(render(OVERRIDE)))
    changed = {path for path in before.keys() & after.keys() if before[path] != after[path]}
    assert changed, "the override changed nothing"
    for path in changed - {p for p in changed if p[:4] == cluster_variable}:
        text = str(after[path])
        assert any(part in text for part in ('job="sd"', "k8s_cluster", "0.7", "70")) or (
            text == "sd" and path[:4] == ("dashboard", "templating", "list", "2")
        ), (
            path,
            before[path],
            after[path],
        )
    # The cluster variable turns from a hidden constant into a query: its own fields differ.
    assert {path[:4] for path in before.keys() ^ after.keys()} == {cluster_variable}


@pytest.mark.parametrize("field", ["runbookURL", "grafanaURL", "vllmJob"])
def test_the_urls_and_the_vllm_job_come_from_config(field: str) -> None:
    value = "https://wiki.example.org/x" if field.endswith("URL") else "llm-serving"
    assert value not in json.dumps(render())
    assert value in json.dumps(render(f"{{ _config+:: {{ {field}: '{value}' }} }}"))


def test_the_generator_refuses_a_threshold_used_other_than_formatted() -> None:
    symbol = mixin.Symbol(0.8, "coverageRatio")
    with pytest.raises(TypeError, match="without a format"):
        str(symbol)
    with pytest.raises(TypeError, match=r"formatted as '\.2f'"):
        f"{symbol:.2f}"
    assert f"{symbol * 100:g}" == f"{mixin.OPEN}coverageRatio*100{mixin.CLOSE}"


def test_the_jsonnetfile_declares_no_dependencies() -> None:
    jsonnetfile = json.loads((REPO_ROOT / "mixin" / "jsonnetfile.json").read_text())
    assert jsonnetfile == {"version": 1, "dependencies": [], "legacyImports": True}


def test_the_documented_usage_renders(tmp_path: Path) -> None:
    """docs/alerting.md's example, importing the mixin as jsonnet-bundler lays it out."""
    text = (REPO_ROOT / "docs" / "alerting.md").read_text(encoding="utf-8")
    example = text.split("## The monitoring mixin", 1)[1].split("```jsonnet\n", 1)[1]
    (tmp_path / "vllm-specdec-exporter").symlink_to(REPO_ROOT)
    result = subprocess.run(
        [require("jsonnet"), "--jpath", str(tmp_path), "--exec", example.split("```", 1)[0]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (rules,) = json.loads(result.stdout).values()
    coverage = next(
        r
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == "SpecDecodeTapCoverageLow"
    )
    assert coverage["expr"].startswith(
        'specdec_request_coverage_ratio{job="specdec-exporter"} < 0.7'
    )


def test_the_mixins_dashboard_names_no_job_and_leads_with_health() -> None:
    """As jsonnet renders it, with the sidecar's job overridden: the job is the variable's
    default, never a literal in a query (issue 29)."""
    from specdec_artifacts.checks import (  # noqa: PLC0415
        first_row_problems,
        hard_coded_jobs,
        panels_of,
        tap_title_problems,
    )

    board = render(OVERRIDE)["dashboard"]
    exprs = [t["expr"] for p in panels_of(board) for t in p["targets"]]
    assert [problem for expr in exprs for problem in hard_coded_jobs(expr)] == []
    assert first_row_problems(board) == [] and tap_title_problems(board) == []
    variable = {v["name"]: v for v in board["templating"]["list"]}["sidecar_job"]
    assert variable["current"]["value"] == ["sd"]

"""mixin/mixin.libsonnet, rendered by the jsonnet command (Debian's `jsonnet`): with its default
_config it is the shipped rule file and dashboard; with an overridden threshold, selector and
cluster label it is what the generator writes from the same values in alerts/config.toml, and
only what those values touch changes."""

from __future__ import annotations

import json
import re
import shutil
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


JB_INSTALL = re.compile(r"jb install (github\.com/([^/\s]+)/([^/@\s]+)(/[^@\s]*)?)@<commit>")
"""`jb install` as docs/alerting.md writes it: host/user/repo, then an optional subdir."""


def jb_vendor(root: Path, package: str) -> Path:
    """The vendor/ tree `jb install <package>@<commit>` lays out, as jsonnet-bundler's code does
    (jsonnet-bundler is a Go program, not installable from Debian, PyPI or npm here):
    `vendor/<host>/<user>/<repo><subdir>` holds the package's files (for a whole repository
    only its mixin/ folder is copied: the mixin imports nothing else), and, with `legacyImports`
    (which `jb init` sets), `vendor/<base(repo + subdir)>` is a relative symlink to it
    (deps.Git.Name and LegacyName, pkg.linkLegacy)."""
    match = JB_INSTALL.fullmatch(f"jb install {package}@<commit>")
    assert match, package
    name, _user, repo, subdir = match.group(1), match.group(2), match.group(3), match.group(4) or ""
    vendor = root / "vendor"
    target = vendor / name
    if subdir:
        assert subdir == "/mixin", subdir
        shutil.copytree(REPO_ROOT / "mixin", target)
    else:
        shutil.copytree(REPO_ROOT / "mixin", target / "mixin")
    (vendor / Path(repo + subdir).name).symlink_to(name)
    return vendor


def documented(section: str, fence: str) -> list[str]:
    text = (REPO_ROOT / "docs" / "alerting.md").read_text(encoding="utf-8")
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in body.split(f"```{fence}\n")[1:]]


def render_with(vendor: Path, program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("jsonnet"), "--jpath", str(vendor), "--exec", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def documented_installs() -> list[str]:
    text = (REPO_ROOT / "docs" / "alerting.md").read_text(encoding="utf-8")
    return [m.group(1) for m in JB_INSTALL.finditer(text)]


def test_the_docs_show_a_whole_repository_install_and_a_mixin_folder_install() -> None:
    installs = documented_installs()
    assert any(JB_INSTALL.fullmatch(f"jb install {p}@<commit>").group(4) is None for p in installs)
    assert any(p.endswith("/mixin") for p in installs)


@pytest.mark.parametrize("package", documented_installs())
def test_the_documented_usage_renders_in_the_layout_jb_install_creates(
    tmp_path: Path, package: str
) -> None:
    """docs/alerting.md's example with the import its install command makes work: the short
    `vllm-specdec-exporter/mixin/...` after a whole-repository install, the full path after an
    install of the mixin folder."""
    vendor = jb_vendor(tmp_path, package)
    (example,) = documented("## The monitoring mixin", "jsonnet")
    short = "import 'vllm-specdec-exporter/mixin/mixin.libsonnet'"
    assert short in example
    if package.endswith("/mixin"):
        example = example.replace(short, f"import '{package}/mixin.libsonnet'")
    result = render_with(vendor, example)
    assert result.returncode == 0, result.stderr
    (rules,) = json.loads(result.stdout).values()
    coverage = next(
        r
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == "SpecDecodeTemperatureSplitCoverageLow"
    )
    assert coverage["expr"].startswith(
        'specdec_request_coverage_ratio{job="specdec-exporter"} < 0.7'
    )


def test_the_short_import_fails_after_a_mixin_folder_install(tmp_path: Path) -> None:
    """The layout is what decides (issue 29's rc 1): the short import needs the whole repository
    installed, whose legacy link is the repository's name."""
    (package,) = [p for p in documented_installs() if p.endswith("/mixin")]
    vendor = jb_vendor(tmp_path, package)
    result = render_with(vendor, "import 'vllm-specdec-exporter/mixin/mixin.libsonnet'")
    assert result.returncode != 0
    assert "couldn't open import" in result.stderr


def _unchecked(data: dict[str, Any]) -> Settings:
    """Validated like the file, except the check that t equals the verdict's: the mixin lets a
    team set another t (and says to set the sidecar's --threshold with it)."""
    t = data["thresholds"]["acceptance_rate"]
    data["thresholds"]["acceptance_rate"] = load().thresholds.acceptance_rate
    settings = Settings.model_validate(data)
    thresholds = settings.thresholds.model_copy(update={"acceptance_rate": t})
    return settings.model_copy(update={"thresholds": thresholds})


def changed_paths(override: str) -> set[tuple[str, ...]]:
    before, after = dict(leaves(render())), dict(leaves(render(override)))
    assert before.keys() == after.keys()
    return {path for path in before if before[path] != after[path]}


def alert_index(name: str) -> tuple[str, ...]:
    groups = render()["groups"]
    alerts = next(i for i, g in enumerate(groups) if g["name"] == "specdec.alerts")
    rule = next(i for i, r in enumerate(groups[alerts]["rules"]) if r["alert"] == name)
    return ("groups", str(alerts), "rules", str(rule))


@pytest.mark.parametrize(
    ("override", "change", "alert", "fields"),
    [
        (
            "{ _config+:: { alerts+: { SpecDecodeAcceptanceLow+: { severity: 'warning' } } } }",
            {"SpecDecodeAcceptanceLow": {"severity": "warning"}},
            "SpecDecodeAcceptanceLow",
            {("labels", "severity")},
        ),
        (
            "{ _config+:: { alerts+: { SpecDecodeSpeedupBelowOne+: { 'for': '20m' } } } }",
            {"SpecDecodeSpeedupBelowOne": {"for": "20m"}},
            "SpecDecodeSpeedupBelowOne",
            {("for",)},
        ),
        (
            "{ _config+:: { alerts+: { SpecDecodeAcceptanceLow+: { keepFiringFor: '30m' } } } }",
            {"SpecDecodeAcceptanceLow": {"keep_firing_for": "30m"}},
            "SpecDecodeAcceptanceLow",
            {("keep_firing_for",)},
        ),
        (
            # The never-up alert's text names its `for` (the startup grace): both change.
            "{ _config+:: { alerts+: { SpecDecodeVLLMNeverUp+: { 'for': '30m' } } } }",
            {"SpecDecodeVLLMNeverUp": {"for": "30m"}},
            "SpecDecodeVLLMNeverUp",
            {("for",), ("annotations", "description")},
        ),
    ],
)
def test_overriding_one_alerts_policy_changes_exactly_that_alert(
    override: str, change: dict[str, Any], alert: str, fields: set[tuple[str, ...]]
) -> None:
    where = alert_index(alert)
    assert changed_paths(override) == {(*where, *field) for field in fields}
    assert render(override) == generated(_unchecked(_data_with(change)))


def test_overriding_t_changes_the_threshold_rule_and_the_dashboards_t_lines_only() -> None:
    override = "{ _config+:: { thresholds+: { acceptanceRate: 0.4 } } }"
    changed = changed_paths(override)
    rules = {p for p in changed if p[0] == "groups"}
    (threshold_rule,) = {p[:4] for p in rules}
    rendered = render(override)
    rule = rendered["groups"][int(threshold_rule[1])]["rules"][int(threshold_rule[3])]
    assert rule["record"] == "instance_model_name:specdec_acceptance_threshold:config"
    assert rule["expr"].startswith("0.4 * group without (method)")
    default = render()
    for path in changed - rules:  # the dashboard's t: its lines, colours and verdict query
        assert path[0] == "dashboard", path
        before, after = after_value(default, path), after_value(rendered, path)
        assert after == 0.4 if before == 0.5 else after == before.replace("0.5 *", "0.4 *"), path
    change = {"thresholds": {"acceptance_rate": 0.4}}
    assert rendered == generated(_unchecked(_data_with(change)))


def after_value(rendered: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = rendered
    for part in path:
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def _data_with(change: dict[str, Any]) -> dict[str, Any]:
    data = load().model_dump(by_alias=True)
    for table, values in change.items():
        target = data["alerts"][table] if table.startswith("SpecDecode") else data[table]
        target.update(values)
    return data


def test_no_rule_hard_codes_the_sidecars_job() -> None:
    """Every rule selects the sidecar's series with `_config.sidecarJob` ([selectors]
    sidecar_job): with another job, the default job appears in no rule."""
    rules = render("{ _config+:: { sidecarJob: 'llm-sidecars' } }")["groups"]
    assert 'job=\\"specdec-exporter\\"' not in json.dumps(rules)
    assert "specdec-exporter" not in json.dumps([r["expr"] for g in rules for r in g["rules"]])
    assert 'job=\\"llm-sidecars\\"' in json.dumps(rules)


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

"""The dashboard: its structure, its panels, fleet scoping (cluster, namespace, pod, model on
every query; the cluster label from the config), the fleet row, and the `--check` rules on
queries (contract metrics only, known labels, guarded divisions and quantiles, scope), shown to
catch each mistake."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from specdec_artifacts.checks import (
    dashboard_problems,
    first_row_problems,
    hard_coded_jobs,
    panels_of,
    query_problems,
    tap_title_problems,
    unscoped_series,
)
from specdec_artifacts.contract import PROBE_FED, VLLM_METRICS
from specdec_artifacts.dashboard import dashboard
from specdec_artifacts.outputs import DASHBOARD_FILE
from specdec_artifacts.rules import record_names, rule_groups
from specdec_artifacts.settings import REPO_ROOT, Settings, load

RECORDED = record_names(rule_groups(load()))


def dashboard_queries(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for panel in panels_of(board) for t in panel["targets"]]


VLLM_CAPTURE = REPO_ROOT / "tests" / "fixtures" / "vllm-0.33.0" / "spec_ngram_k4.t3.prom"


@pytest.fixture
def board() -> dict[str, Any]:
    return dashboard(load())


def with_cluster_label(label: str = "cluster", vllm_job: str = "vllm") -> Settings:
    data = load().model_dump(by_alias=True)
    data["selectors"].update(cluster_label=label, vllm_job=vllm_job)
    return Settings.model_validate(data)


def test_the_generated_dashboard_passes_its_checks(board: dict[str, Any]) -> None:
    assert dashboard_problems(board, RECORDED) == []


def test_with_a_cluster_label_every_query_filters_on_it_too() -> None:
    settings = with_cluster_label()
    groups = rule_groups(settings)
    board = dashboard(settings)
    assert dashboard_problems(board, record_names(groups), ("namespace", "cluster")) == []
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["cluster"]["definition"] == "label_values(specdec_build_info, cluster)"
    assert variables["sidecar_job"]["definition"] == (
        'label_values(specdec_build_info{cluster=~"$cluster"}, job)'
    )
    assert variables["cluster"]["allValue"] == ".*", "All must match series without the label"
    assert 'cluster=~"$cluster"' in variables["namespace"]["definition"]
    day_over_day = next(
        r for g in groups for r in g["rules"] if r.get("record", "").endswith(":ratio_rate1h")
    )
    assert day_over_day["expr"].startswith("sum by (cluster, namespace, model_name)")


def test_without_a_cluster_label_the_variable_is_hidden_and_unused(board: dict[str, Any]) -> None:
    cluster = board["templating"]["list"][1]
    assert (cluster["name"], cluster["type"], cluster["hide"]) == ("cluster", "constant", 2)
    assert not any("$cluster" in expr for expr in dashboard_queries(board))
    assert dashboard_problems(board, RECORDED, ("namespace", "cluster")) != []


def test_vllm_latency_panels_read_the_job_from_a_variable_the_config_presets() -> None:
    """One dashboard serves any vLLM job: the job is a variable listing the jobs of vLLM's
    series in the selected pods, opened on the configured one."""
    board = dashboard(with_cluster_label(vllm_job="llm-serving"))
    vllm = [e for e in dashboard_queries(board) if "vllm:" in e]
    assert len(vllm) == 6
    assert not any("llm-serving" in expr for expr in dashboard_queries(board))
    variable = {v["name"]: v for v in board["templating"]["list"]}["vllm_job"]
    assert variable["definition"] == (
        'label_values(vllm:e2e_request_latency_seconds_count{cluster=~"$cluster", '
        'namespace=~"$namespace", pod=~"$pod"}, job)'
    )
    assert variable["current"] == {"text": ["llm-serving"], "value": ["llm-serving"]}
    for expr in vllm:
        for matcher in (
            'job=~"$vllm_job"',
            'cluster=~"$cluster"',
            'namespace=~"$namespace"',
            'pod=~"$pod"',
            'model_name=~"$model"',
        ):
            assert matcher in expr, (matcher, expr)


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        (
            'rate(specdec_drafts_total{job="x"}[5m])',
            "specdec_drafts_total is not filtered on namespace",
        ),
        (
            "sum(rate(vllm:e2e_request_latency_seconds_count[5m]))",
            "vllm:e2e_request_latency_seconds_count is not filtered on namespace",
        ),
        (
            'sort(instance_model_name:specdec_acceptance_rate:ratio_rate5m{pod=~"$pod"})',
            "instance_model_name:specdec_acceptance_rate:ratio_rate5m is not filtered on namespace",
        ),
    ],
)
def test_the_scope_check_catches(expr: str, problem: str) -> None:
    assert unscoped_series(expr, ("namespace",)) == [problem]


def test_the_scope_check_accepts_a_scoped_query() -> None:
    assert (
        unscoped_series(
            'sum by (model_name) (rate(specdec_drafts_total{namespace=~"$ns"}[5m]))', ("namespace",)
        )
        == []
    )


def test_the_committed_json_is_the_generated_one(board: dict[str, Any]) -> None:
    assert json.loads((REPO_ROOT / DASHBOARD_FILE).read_text()) == board


def test_identity_datasource_and_variables(board: dict[str, Any]) -> None:
    assert board["uid"] == "vllm-specdec"
    assert "vllm" in board["tags"]
    assert "__inputs" not in board and board.get("id") is None
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == [
        "datasource",
        "cluster",
        "sidecar_job",
        "namespace",
        "pod",
        "model",
        "engine",
        "bucket",
        "vllm_job",
    ]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["pod"]["definition"] == (
        'label_values(specdec_build_info{job=~"$sidecar_job", namespace=~"$namespace"}, pod)'
    )
    for panel in panels_of(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"


def test_the_panels_the_issue_asks_for(board: dict[str, Any]) -> None:
    titles = {panel["title"] for panel in panels_of(board)}
    assert {
        "Acceptance rate per model",
        "Acceptance rate by temperature bucket",
        "Per-request acceptance (heatmap)",
        "Per-request acceptance P10 / P50 / P90",
        "Mean acceptance length",
        "Acceptance rate per draft position",
        "Modelled speedup",
        "Draft token flow",
        "Time to first token P90",
        "Time per output token P90",
        "Traffic share per temperature bucket",
        "Split coverage (engine probe or request tap)",
        "Sidecar target up",
        "Models by acceptance",
        "Models by modelled speedup",
        "Pods by acceptance",
        "Pods by modelled speedup",
        "Draft cost c",
        "vLLM up since the sidecar started",
    } <= titles


def test_the_fleet_row_ranks_the_recording_rules_worst_first(board: dict[str, Any]) -> None:
    panels = {p["title"]: p for p in panels_of(board)}
    expected = {
        "Models by acceptance": "namespace_model_name:specdec_acceptance_rate:ratio_rate5m",
        "Models by modelled speedup": "namespace_model_name:specdec_estimated_speedup:min",
        "Pods by acceptance": "instance_model_name:specdec_acceptance_rate:ratio_rate5m",
        "Pods by modelled speedup": "specdec_estimated_speedup",
    }
    for title, series in expected.items():
        (target,) = panels[title]["targets"]
        assert panels[title]["type"] == "table"
        assert target["expr"].startswith(f"sort({series}{{")
        assert (target["instant"], target["format"]) == (True, "table")


def test_acceptance_panel_draws_t_and_the_break_even_in_the_same_unit(
    board: dict[str, Any],
) -> None:
    panel = next(p for p in panels_of(board) if p["title"] == "Acceptance rate per model")
    rate, threshold, break_even = (t["expr"] for t in panel["targets"])
    assert "specdec_accepted_tokens_total" in rate and "specdec_draft_tokens_total" in rate
    assert "0.5 * group without (method) (specdec_speculative_info{" in threshold
    assert "specdec_break_even_acceptance_rate" in break_even
    assert (
        "the acceptance rate at which the modelled speedup L / (1 + k·c) is 1"
        in (panel["description"])
    )
    dashed = panel["fieldConfig"]["overrides"][0]["matcher"]["options"]
    assert re.match(dashed, "threshold llama") and re.match(dashed, "break-even llama")
    assert not re.match(dashed, "llama")


def test_latency_panels_show_vllm_histograms_next_to_the_tap(board: dict[str, Any]) -> None:
    panels = {p["title"]: p for p in panels_of(board)}
    ttft = " ".join(t["expr"] for t in panels["Time to first token P90"]["targets"])
    tpot = " ".join(t["expr"] for t in panels["Time per output token P90"]["targets"])
    assert "specdec_request_time_to_first_token_seconds_bucket" in ttft
    assert "vllm:time_to_first_token_seconds_bucket" in ttft
    assert "specdec_request_time_per_output_token_seconds_bucket" in tpot
    assert "vllm:inter_token_latency_seconds_bucket" in tpot


def test_no_data_reads_differently_from_no_traffic_on_every_panel(board: dict[str, Any]) -> None:
    """No series at all (not scraped) says "No data"; series that counted nothing give NaN,
    mapped to "No traffic"."""
    for panel in panels_of(board):
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["noValue"].startswith("No data"), panel["title"]
        assert "No traffic" not in defaults["noValue"]
        assert defaults["mappings"][0]["options"]["match"] == "null+nan"
        assert defaults["mappings"][0]["options"]["result"]["text"] == "No traffic"


def test_every_ratio_and_quantile_falls_back_to_nan_where_nothing_was_counted(
    board: dict[str, Any],
) -> None:
    """An idle model's ratio is NaN ("No traffic"), not absent ("No data")."""
    for panel in panels_of(board):
        for target in panel["targets"]:
            expr = target["expr"]
            if ("/ (" in expr or "histogram_quantile" in expr) and "fleet" not in expr:
                if panel["type"] == "table":  # the fleet's recording rules rank what exists
                    continue
                assert re.search(r"\nor\n.* \* NaN", expr), (panel["title"], expr)
    for title in ("Speedup (c calibrated, else assumed)", "Modelled speedup"):
        (target,) = next(p for p in panels_of(board) if p["title"] == title)["targets"]
        assert re.search(r"\nor\n.* \* NaN$", target["expr"]), "the gauge is absent when idle"


def test_panels_fit_the_grid_without_overlapping(board: dict[str, Any]) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, panel["title"]
        cells |= area
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("rate(specdec_acceptance_ratio[5m])", "specdec_acceptance_ratio is not in the exported"),
        ("specdec_drafts", "specdec_drafts is not in the exported-metrics contract"),
        ("rate(vllm:time_to_first_token_bucket[5m])", "not a vLLM series the contract lists"),
        (
            'rate(specdec_drafts_total{temperature_bucket="0"}[5m])',
            "specdec_drafts_total has no label temperature_bucket",
        ),
        ("a:specdec_nothing:rate5m", "recording rule a:specdec_nothing:rate5m is not generated"),
        (
            "rate(specdec_accepted_tokens_total[5m]) / rate(specdec_draft_tokens_total[5m])",
            "division without",
        ),
        (
            "sum(rate(specdec_accepted_tokens_total[5m]))"
            " / (sum(rate(specdec_draft_tokens_total[5m])))",
            "division without",
        ),
        (
            "histogram_quantile(0.9, rate(specdec_request_acceptance_rate_bucket[5m]))",
            "histogram_quantile without",
        ),
    ],
)
def test_the_query_check_catches(expr: str, problem: str) -> None:
    assert any(problem in p for p in query_problems(expr, RECORDED))


@pytest.mark.parametrize(
    "expr",
    [
        "rate(specdec_accepted_tokens_total[5m])\n/ (rate(specdec_draft_tokens_total[5m]) > 0)",
        "sum by (model_name, position) (rate(specdec_accepted_tokens_per_position_total[5m]))\n"
        "/ ignoring (position) group_left ()\n"
        "(sum by (model_name) (rate(specdec_drafts_total[5m])) > 0)",
        "histogram_quantile(0.9, sum by (le) (rate(specdec_request_acceptance_rate_bucket[5m])))\n"
        "and\nsum(rate(specdec_request_acceptance_rate_count[5m])) > 0",
        'up{job="specdec-exporter", namespace=~"$namespace"}',
        'specdec_spec_decode_enabled{model_name="the specdec_fake name / in a label value"}',
    ],
)
def test_the_query_check_accepts(expr: str) -> None:
    assert query_problems(expr, RECORDED) == []


def test_the_dashboard_check_catches_structural_mistakes(board: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(board))
    broken["__inputs"] = [{"name": "DS_PROMETHEUS"}]
    broken["templating"]["list"] = broken["templating"]["list"][:-1]
    first = next(panels_of(broken))
    del first["fieldConfig"]["defaults"]["noValue"]
    first["datasource"] = {"type": "prometheus", "uid": "prometheus"}

    problems = dashboard_problems(broken, RECORDED)

    assert problems[:2] == [
        "dashboard has __inputs: use the ${datasource} variable instead",
        "missing variable $vllm_job",
    ]
    assert any('no "No data" value and "No traffic" mapping' in p for p in problems)
    assert any("datasource is not ${datasource}" in p for p in problems)


def test_the_vllm_families_the_dashboard_reads_exist_in_a_real_capture() -> None:
    """A real vLLM 0.33 /metrics: every vLLM series the contract allows, with its labels."""
    samples = re.findall(r"^(vllm:\w+)\{([^}]*)\}", VLLM_CAPTURE.read_text(), re.MULTILINE)
    seen = {name: set(re.findall(r"(\w+)=", labels)) for name, labels in samples}
    for metric in VLLM_METRICS:
        for series in metric.sample_names():
            assert series in seen, series
            assert seen[series] <= metric.allowed_labels(), series


# --- the first row, the alert annotations, the load level ---------------------------------------


def test_the_first_row_is_health_then_the_four_stats_of_now(board: dict[str, Any]) -> None:
    first_row, health, *stats = board["panels"][:6]
    assert first_row["type"] == "row" and first_row["gridPos"]["y"] == 0
    assert [(p["title"], p["type"]) for p in (health, *stats)] == [
        ("Health", "stat"),
        ("Acceptance now", "stat"),
        ("Speedup (c calibrated, else assumed)", "stat"),
        ("Verdict", "stat"),
        ("Split coverage (engine probe or request tap)", "stat"),
    ]
    assert {p["gridPos"]["y"] for p in (health, *stats)} == {1}
    assert sum(p["gridPos"]["w"] for p in (health, *stats)) == 24
    speedup = stats[1]["targets"][0]
    assert "specdec_estimated_speedup" in speedup["expr"]
    assert (
        "group_left (source)" in speedup["expr"] and "specdec_draft_cost_ratio" in speedup["expr"]
    )
    assert speedup["legendFormat"] == "{{model_name}} (c: {{source}})"
    coverage = stats[3]["targets"][0]["expr"]
    assert "specdec_temperature_split_info" in coverage and "or on (model_name)" in coverage


def test_the_verdict_stat_shows_checks_words(board: dict[str, Any]) -> None:
    verdict = next(p for p in panels_of(board) if p["title"] == "Verdict")
    (words,) = [m for m in verdict["fieldConfig"]["defaults"]["mappings"] if m["type"] == "value"]
    assert {k: v["text"] for k, v in words["options"].items()} == {
        "0": "disable",
        "1": "below threshold",
        "2": "borderline",
        "3": "healthy",
    }
    expr = verdict["targets"][0]["expr"]
    assert expr.startswith("(\n0 * (min by (model_name) (specdec_estimated_speedup{")
    assert "< 1)\nor\n1 + 0 * (" in expr and "<= 0.65)" in expr
    assert "0.5 * group without (method) (specdec_speculative_info{" in expr


def test_the_alerts_are_annotations_scoped_like_the_panels() -> None:
    board = dashboard(with_cluster_label())
    notes = board["annotations"]["list"]
    assert [(n["name"], n["iconColor"]) for n in notes] == [
        ("Pages (critical SpecDecode alerts)", "red"),
        ("Tickets (warning SpecDecode alerts)", "orange"),
    ]
    assert notes[0]["expr"] == (
        'ALERTS{alertname=~"SpecDecode.*", alertstate="firing", cluster=~"$cluster", '
        'namespace=~"$namespace", severity="critical"}'
    )
    assert all(n["datasource"]["uid"] == "${datasource}" and n["enable"] for n in notes)


def test_the_annotation_check_catches_an_unscoped_alerts_query(board: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(board))
    broken["annotations"]["list"][0]["expr"] = 'ALERTS{alertname=~"SpecDecode.*"}'
    assert dashboard_problems(broken, RECORDED) == [
        "annotation 'Pages (critical SpecDecode alerts)': ALERTS is not filtered on namespace"
    ]


def test_the_load_level_row_reads_the_sidecars_batch_families(board: dict[str, Any]) -> None:
    panels = {p["title"]: p for p in panels_of(board)}
    acceptance = panels["Acceptance rate by running-batch bucket"]["targets"][0]["expr"]
    length = panels["Mean acceptance length by running-batch bucket"]["targets"][0]["expr"]
    assert acceptance.startswith(
        "sum by (model_name, batch_bucket) (rate(specdec_batch_accepted_tokens_total{"
    )
    assert "/ (sum by (model_name, batch_bucket) (rate(specdec_batch_draft_tokens_total{" in (
        acceptance
    )
    assert length.startswith("1 + sum by (model_name, batch_bucket)")
    assert "specdec_batch_drafts_total" in length


def test_the_batch_families_are_known_to_the_check_from_the_contract_alone() -> None:
    """specdec_batch_* are in the exported-metrics contract (SPECDEC_METRICS); a name outside
    it, or a label the family lacks, is still refused."""
    assert query_problems("rate(specdec_batch_steps_total[5m])", RECORDED) == []
    assert query_problems("rate(specdec_batch_step_total[5m])", RECORDED) == [
        "specdec_batch_step_total is not in the exported-metrics contract"
    ]
    assert query_problems(
        'rate(specdec_batch_steps_total{temperature_bucket="0"}[5m])', RECORDED
    ) == ["specdec_batch_steps_total has no label temperature_bucket"]


# --- issue 29: health first, jobs as variables, the split named, stats of now ------------------


def committed_dashboards() -> dict[str, dict[str, Any]]:
    """The dashboards as shipped: the JSON file and the one inside the Kubernetes ConfigMap."""
    configmap = yaml.safe_load(
        (REPO_ROOT / "deploy/monitoring/generated/grafana-dashboards.yaml").read_text()
    )
    shipped = {"dashboards/": json.loads((REPO_ROOT / DASHBOARD_FILE).read_text())}
    for key, text in configmap["data"].items():
        shipped[f"ConfigMap {key}"] = json.loads(text)
    return shipped


@pytest.mark.parametrize("where", sorted(committed_dashboards()))
def test_the_shipped_dashboards_hard_code_no_job_and_lead_with_health(where: str) -> None:
    shipped = committed_dashboards()[where]
    assert dashboard_problems(shipped, RECORDED) == []
    for panel in panels_of(shipped):
        for target in panel["targets"]:
            assert hard_coded_jobs(target["expr"]) == [], (panel["title"], target["expr"])
            assert 'job="' not in target["expr"] and "specdec-exporter" not in target["expr"]
    assert first_row_problems(shipped) == []
    assert tap_title_problems(shipped) == []


def test_the_sidecar_job_is_a_variable_the_config_presets() -> None:
    data = load().model_dump(by_alias=True)
    data["selectors"]["sidecar_job"] = "llm-sidecars"
    settings = Settings.model_validate(data)
    board = dashboard(settings)
    assert not any("llm-sidecars" in expr for expr in dashboard_queries(board))
    variable = {v["name"]: v for v in board["templating"]["list"]}["sidecar_job"]
    assert variable["definition"] == "label_values(specdec_build_info, job)"
    assert variable["current"] == {"text": ["llm-sidecars"], "value": ["llm-sidecars"]}
    sidecar = [  # the per-model recording rules sum over pods, and so over jobs
        e
        for e in dashboard_queries(board)
        if ("specdec_" in e or "up{" in e) and "namespace_model_name:" not in e
    ]
    assert sidecar and all('job=~"$sidecar_job"' in e for e in sidecar)
    assert settings.selectors.sidecar == 'job="llm-sidecars"', "the rules' matcher"


@pytest.mark.parametrize(
    ("expr", "caught"),
    [
        ('up{job="specdec-exporter", namespace=~"$namespace"}', True),
        ('rate(specdec_drafts_total{job=~"specdec.*"}[5m])', True),
        ('rate(specdec_drafts_total{job!="x"}[5m])', True),
        ('rate(specdec_drafts_total{job=~"$sidecar_job"}[5m])', False),
        ('rate(specdec_drafts_total{cronjob="x"}[5m])', False),
    ],
)
def test_the_job_check_catches_a_literal_job(expr: str, caught: bool) -> None:
    assert bool(hard_coded_jobs(expr)) is caught


def test_the_job_check_runs_over_the_board(board: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(board))
    next(panels_of(broken))["targets"][0]["expr"] = 'min(up{job="specdec-exporter"})'
    assert any("job is hard-coded" in p for p in dashboard_problems(broken, RECORDED))


def test_the_health_stat_reads_target_vllm_split_and_probe(board: dict[str, Any]) -> None:
    health = next(p for p in panels_of(board) if p["title"] == "Health")
    exprs = [t["expr"] for t in health["targets"]]
    assert [t["legendFormat"] for t in health["targets"]] == [
        "sidecar target",
        "vLLM",
        "temperature split",
        "engine probe",
    ]
    assert exprs[0].startswith("min(up{") and exprs[1].startswith("min(specdec_up{")
    assert 'source="probe"' in exprs[2] and 'source="none"' in exprs[2]
    assert 'temperature_split="on", batch_split="on"' in exprs[3]
    assert health["fieldConfig"]["defaults"]["noValue"] == "No data: no sidecar scraped"
    (words,) = [m for m in health["fieldConfig"]["defaults"]["mappings"] if m["type"] == "value"]
    assert {k: v["text"] for k, v in words["options"].items()} == {
        "0": "DOWN",
        "1": "up",
        "2": "engine probe",
        "3": "request tap",
        "4": "none",
        "5": "a split off",
        "6": "both splits on",
        "7": "not in vLLM",
    }


def test_the_first_row_check_catches_a_board_without_health(board: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(board))
    broken["panels"] = [p for p in broken["panels"] if p["title"] != "Health"]
    assert first_row_problems(broken) == [
        "the first row 'Now: health, acceptance, speedup, verdict, split coverage' holds no "
        "health stat reading up, specdec_up, specdec_temperature_split_info, "
        "specdec_engine_probe_info"
    ]


@pytest.mark.parametrize(
    ("title", "legend", "caught"),
    [
        ("Tap coverage", "{{model_name}}", True),
        ("Split coverage", "tap {{temperature_bucket}}", True),
        ("Split coverage (engine probe or request tap)", "{{model_name}}", False),
    ],
)
def test_the_title_check_catches_tap_for_a_family_the_probe_feeds(
    board: dict[str, Any], title: str, legend: str, caught: bool
) -> None:
    broken = json.loads(json.dumps(board))
    panel = next(
        p for p in panels_of(broken) if p["title"] == "Split coverage (engine probe or request tap)"
    )
    panel["title"] = title
    panel["targets"][0]["legendFormat"] = legend
    assert bool(tap_title_problems(broken)) is caught


def test_no_title_says_tap_alone(board: dict[str, Any]) -> None:
    titles = [p["title"] for p in board["panels"]]
    assert "By temperature bucket (engine probe or request tap)" in titles
    assert not [t for t in titles if re.search(r"\btap\b", t, re.I) and "probe" not in t]


def test_the_probe_fed_series_are_the_ones_the_sidecar_exports_from_the_probe() -> None:
    """The golden exposition is a sidecar reading a vLLM with the engine probe: its
    specdec_request* series are what the probe feeds."""
    golden = (REPO_ROOT / "tests" / "golden" / "exporter_two_engines.prom").read_text()
    assert 'specdec_temperature_split_info{source="probe"} 1.0' in golden
    exported = set(re.findall(r"^(specdec_request\w*)[{ ]", golden, re.MULTILINE))
    assert exported == PROBE_FED


def test_stats_show_now_never_a_value_from_before_traffic_stopped(board: dict[str, Any]) -> None:
    for panel in panels_of(board):
        if panel["type"] != "stat":
            continue
        assert panel["options"]["reduceOptions"]["calcs"] == ["last"], panel["title"]
        for target in panel["targets"]:
            assert (target["instant"], target["range"]) == (True, False), panel["title"]


def test_acceptance_now_has_the_borderline_band(board: dict[str, Any]) -> None:
    panel = next(p for p in panels_of(board) if p["title"] == "Acceptance now")
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps == [
        {"color": "red", "value": None},
        {"color": "yellow", "value": 0.5},
        {"color": "green", "value": 0.65},
    ]


def test_failed_polls_are_per_minute_not_requests_per_second(board: dict[str, Any]) -> None:
    units = {p["fieldConfig"]["defaults"]["unit"] for p in panels_of(board)}
    assert "reqps" not in units
    panel = next(p for p in panels_of(board) if p["title"].startswith("Failed polls of vLLM"))
    assert panel["fieldConfig"]["defaults"]["unit"] == "suffix: /min"
    assert panel["targets"][0]["expr"].startswith("60 * sum by (pod, instance, reason)")

"""The dashboard's verdict stat, evaluated by `promtool test rules`: for each row of the decision
table it shows the verdict core/verdict.py gives for the same acceptance and speedup, and NaN
("No traffic") for a model that drafts nothing, or stopped drafting: never its last verdict."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from specdec_artifacts.checks import panels_of
from specdec_artifacts.dashboard import VERDICTS, dashboard
from specdec_artifacts.outputs import RULES_FILE
from specdec_artifacts.settings import REPO_ROOT, load
from test_rules import promtool

from specdec_exporter.core.verdict import verdict

DRAFT_TOKENS_PER_MINUTE = 600
CASES = {
    # model: (acceptance rate, modelled speedup)
    "net-loss": (0.8, 0.9),
    "below-t": (0.4, 1.2),
    "borderline": (0.6, 1.3),
    "healthy": (0.8, 2.0),
}
IDLE = "idle"
STOPPED = "stopped"
"""Drafted with a net loss for the first 8 minutes, then nothing: at 15m its verdict is gone."""
TARGET = 'job="specdec-exporter", namespace="llm", pod="p", instance="p:10088"'


def verdict_query() -> str:
    """The panel's query as Prometheus gets it: every variable All, a 5m rate window."""
    panel = next(p for p in panels_of(dashboard(load())) if p["title"] == "Verdict")
    (target,) = panel["targets"]
    expr: str = target["expr"].replace("$__rate_interval", "5m")
    return re.sub(r"\$\w+", ".*", expr)


def series(model: str, acceptance: float, speedup: float) -> list[dict[str, str]]:
    labels = f'{TARGET}, model_name="{model}"'
    drafted = 0 if model == IDLE else DRAFT_TOKENS_PER_MINUTE
    minutes = 8 if model == STOPPED else 20

    def counter(per_minute: float) -> str:
        flat = f" {per_minute * minutes:g}x{20 - minutes}" if minutes < 20 else ""
        return f"0+{per_minute:g}x{minutes}{flat}"

    return [
        {
            "series": f'specdec_draft_tokens_total{{{labels}, engine="0"}}',
            "values": counter(drafted),
        },
        {
            "series": f'specdec_accepted_tokens_total{{{labels}, engine="0"}}',
            "values": counter(drafted * acceptance),
        },
        {"series": f"specdec_estimated_speedup{{{labels}}}", "values": f"{speedup:g}x20"},
        {"series": f'specdec_speculative_info{{{labels}, method="ngram"}}', "values": "1x20"},
    ]


def expected(acceptance: float, speedup: float) -> int:
    result = verdict(True, 1.0, acceptance, speedup=speedup)
    return next(code for code, (v, _) in VERDICTS.items() if v is result)


def test_the_verdict_stat_agrees_with_the_cores_table(tmp_path: Path) -> None:
    idle = {IDLE: (0.0, 0.5), STOPPED: (0.8, 0.9)}
    cases = {**CASES, **idle}
    query = verdict_query()
    test: dict[str, Any] = {
        "rule_files": [str(REPO_ROOT / RULES_FILE)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [s for model, case in cases.items() for s in series(model, *case)],
                "promql_expr_test": [
                    {
                        "expr": f"(\n{query}\n) == (\n{query}\n)",  # NaN != NaN: not shown
                        "eval_time": "15m",
                        "exp_samples": [
                            {"labels": f'{{model_name="{model}"}}', "value": expected(*case)}
                            for model, case in CASES.items()
                        ],
                    },
                    {  # NaN != NaN: 1 exactly where the stat shows "No traffic"
                        "expr": f"(\n{query}\n) != bool (\n{query}\n)",
                        "eval_time": "15m",
                        "exp_samples": [
                            {"labels": f'{{model_name="{model}"}}', "value": int(model in idle)}
                            for model in cases
                        ],
                    },
                ],
            }
        ],
    }
    assert sorted(expected(*case) for case in CASES.values()) == sorted(VERDICTS)
    path = tmp_path / "verdict.test.yaml"
    path.write_text(yaml.safe_dump(test), encoding="utf-8")

    result = promtool("test", "rules", str(path))

    assert result.returncode == 0, result.stdout + result.stderr

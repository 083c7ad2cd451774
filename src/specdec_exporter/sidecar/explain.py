"""What the live page says next to a verdict: the comparison that decided it, the t, c (and its
source), method and k it rests on, and the runbook section to read; and the page's links."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from specdec_exporter.core.model import DEFAULT_DRAFT_COST_RATIO, MEASURED_OR_SET, DraftCost
from specdec_exporter.core.verdict import DEFAULT_CRITERIA, NET_LOSS_BELOW, Criteria, Verdict
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.runbook import RUNBOOK_LINK

MODEL_SECTIONS = {
    Verdict.DISABLE: "SpecDecodeSpeedupBelowOne",
    Verdict.BELOW_THRESHOLD: "SpecDecodeAcceptanceLow",
    Verdict.NOT_DRAFTING: "SpecDecodeNotDrafting",
}
"""A model's (or an engine's) verdict -> the alert that pages for it, whose runbook section
explains it (docs/architecture.md's decision table). Other verdicts page nobody: they link to the
runbook's top, which holds the table."""
BUCKET_SECTIONS = {
    Verdict.DISABLE: "SpecDecodeSpeedupBelowOne",
    Verdict.BELOW_THRESHOLD: "SpecDecodeBucketAcceptanceLow",
}
"""The same for a temperature bucket's verdict (the bucket alert tickets instead of paging)."""
ASSUMED_COST_SECTION = "SpecDecodeSpeedupBelowOneAssumedCost"
VLLM_DOWN_SECTION, VLLM_NEVER_UP_SECTION = "SpecDecodeVLLMUnreachable", "SpecDecodeVLLMNeverUp"
DECISION_TABLE = "decision table"
GRAFANA_MODEL_VARIABLE = "var-model"
"""The dashboard's model variable (tools/specdec_artifacts/rules.py maps model_name to it)."""


@dataclass(frozen=True, slots=True)
class PageContext:
    """The settings the page explains verdicts with: c (and its method), t and the band's top,
    and where its links point."""

    cost: DraftCost = field(default_factory=lambda: DraftCost(DEFAULT_DRAFT_COST_RATIO, "default"))
    criteria: Criteria = DEFAULT_CRITERIA
    runbook_url: str = RUNBOOK_LINK
    """--runbook-url, else the sidecar's own /runbook (relative to the page)."""
    grafana_dashboard_url: str | None = None
    window: float | None = None
    """The sidecar's --window: what the header says while figures are missing (None: unknown)."""

    @classmethod
    def of(cls, settings: Settings) -> PageContext:
        return cls(
            settings.draft_cost,
            settings.criteria,
            settings.runbook_url or RUNBOOK_LINK,
            settings.grafana_dashboard_url,
            settings.window,
        )

    def runbook(self, section: str | None) -> str:
        """The runbook's section ``section`` (an alert name; GitHub's anchor is its lower case, as
        the alerts' ``runbook_url``), or its top."""
        return self.runbook_url if section is None else f"{self.runbook_url}#{section.lower()}"

    def grafana(self, model: str | None = None) -> str | None:
        """The dashboard, filtered to ``model`` when given; None when no URL is configured."""
        if self.grafana_dashboard_url is None or model is None:
            return self.grafana_dashboard_url
        query = urllib.parse.urlencode({GRAFANA_MODEL_VARIABLE: model})
        separator = "&" if "?" in self.grafana_dashboard_url else "?"
        return f"{self.grafana_dashboard_url}{separator}{query}"


def runbook_section(
    verdict: str,
    *,
    bucket: bool,
    acceptance_rate: float | None = None,
    criteria: Criteria = DEFAULT_CRITERIA,
    cost: DraftCost | None = None,
) -> str | None:
    """The alert whose runbook section explains ``verdict``; None: the decision table. A model's
    `disable` links the alert that fires for it: AcceptanceLow while a < t (it pages then), the
    assumed-cost ticket while c is not measured or set, else SpeedupBelowOne."""
    try:
        known = Verdict(verdict)
    except ValueError:
        return None
    if known is Verdict.DISABLE and not bucket:
        if acceptance_rate is not None and acceptance_rate < criteria.threshold:
            return MODEL_SECTIONS[Verdict.BELOW_THRESHOLD]
        if cost is not None and cost.source not in MEASURED_OR_SET:
            return ASSUMED_COST_SECTION
    return (BUCKET_SECTIONS if bucket else MODEL_SECTIONS).get(known)


def decided_by(
    verdict: str,
    *,
    acceptance_rate: float | None,
    speedup: float | None,
    break_even: float | None,
    criteria: Criteria,
) -> str:
    """The comparison of the decision table that gave ``verdict`` (core/verdict.py), in figures."""
    t, top = criteria.threshold, criteria.healthy_above
    a = "unknown" if acceptance_rate is None else f"{acceptance_rate:.3f}"
    s = "unknown" if speedup is None else f"{speedup:.2f}"
    if verdict == Verdict.DISABLE:
        if break_even is not None and break_even > 1:
            return f"break-even {break_even:.3g} > 1: no acceptance pays"
        return f"modelled speedup {s} < {NET_LOSS_BELOW:g}"
    if verdict == Verdict.BELOW_THRESHOLD:
        paid = "speedup unknown (no k)" if speedup is None else f"speedup {s} ≥ {NET_LOSS_BELOW:g}"
        return f"a {a} < t {t:g}; {paid}"
    if verdict == Verdict.BORDERLINE:
        return f"t {t:g} ≤ a {a} ≤ {top:g}"
    if verdict == Verdict.HEALTHY:
        return f"a {a} > {top:g}"
    if verdict == Verdict.NOT_DRAFTING:
        return "no drafts in the window"
    if verdict == Verdict.NOT_ENABLED:
        return "no spec-decode metrics"
    return ""


def basis(cost: DraftCost, criteria: Criteria, k: int | None) -> str:
    """``t 0.5 · c = 0.1 (default of method draft_model) · k 4``: what every verdict rests on."""
    method = "" if cost.source == "method" or cost.method is None else f" · method {cost.method}"
    k_text = "unknown" if k is None else str(k)
    return f"t {criteria.threshold:g} · {cost.describe()}{method} · k {k_text}"

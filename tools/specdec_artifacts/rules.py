"""Prometheus recording and alerting rules for speculative decoding, built from the settings.

Recording rules are named `level:metric:operation`. Levels: `instance_model_name` (one scrape
target, engines summed), `..._engine`, `..._position`, `..._temperature_bucket`, and
`namespace_model_name` (every pod of a model in a namespace, for day-over-day comparisons).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec_artifacts.promql import guarded_ratio, rate, sum_by, sum_without
from specdec_artifacts.settings import Settings

Rule = dict[str, Any]
RuleGroup = dict[str, Any]

POD = "instance_model_name"
ENGINE = "instance_model_name_engine"
POSITION = "instance_model_name_position"
BUCKET = "instance_model_name_temperature_bucket"
MODEL = "namespace_model_name"
MODEL_LABELS = "namespace, model_name"

INHIBITING_ALERTS = ("SpecDecodeSidecarDown", "SpecDecodeVLLMUnreachable")
INHIBITED_ALERTS = (
    "SpecDecodeAcceptanceLow",
    "SpecDecodeBucketAcceptanceLow",
    "SpecDecodeBucketAcceptanceTailLow",
    "SpecDecodeSpeedupBelowOne",
    "SpecDecodeNotDrafting",
    "SpecDecodeTapCoverageLow",
)
"""Per-pod alerts whose numbers cannot be trusted while that pod's sidecar or vLLM is down."""


@dataclass(frozen=True)
class Names:
    """Recording-rule names; the operation suffix carries the configured window."""

    window: str
    comparison: str
    offset: str

    @classmethod
    def of(cls, settings: Settings) -> Names:
        comparison = f"rate{settings.comparison_window}"
        return cls(window=f"rate{settings.rate_window}", comparison=comparison,
                   offset=f"{comparison}_offset{settings.comparison_offset}")

    def pod(self, metric: str, operation: str = "") -> str:
        return f"{POD}:specdec_{metric}:{operation or self.window}"

    def engine(self, metric: str, operation: str) -> str:
        return f"{ENGINE}:specdec_{metric}:{operation}"

    def bucket(self, metric: str, operation: str = "") -> str:
        return f"{BUCKET}:specdec_{metric}:{operation or self.window}"

    def model(self, metric: str, operation: str) -> str:
        return f"{MODEL}:specdec_{metric}:{operation}"


def rule_groups(settings: Settings) -> list[RuleGroup]:
    """The whole rule file: recording groups first, then the alerts that read them."""
    return [
        {"name": "specdec.recording.model", "rules": model_recording_rules(settings)},
        {"name": "specdec.recording.bucket", "rules": bucket_recording_rules(settings)},
        {"name": "specdec.recording.day-over-day", "rules": comparison_recording_rules(settings)},
        {"name": "specdec.alerts", "rules": alerting_rules(settings)},
    ]


def model_recording_rules(settings: Settings) -> list[Rule]:
    """Per pod and model (engines summed before dividing), per engine, per position."""
    names, sel, w = Names.of(settings), settings.sidecar_selector, settings.rate_window
    ratio_op, mean_op = f"ratio_{names.window}", f"mean_{names.window}"

    def per_pod(counter: str) -> Rule:
        expr = sum_without("engine", rate(f"specdec_{counter}_total", w, sel))
        return _record(names.pod(counter), expr)

    drafts, draft_tokens = names.pod("drafts"), names.pod("draft_tokens")
    accepted, generated = names.pod("accepted_tokens"), names.pod("generation_tokens")
    engine_accepted = rate("specdec_accepted_tokens_total", w, sel)
    per_position = sum_without("engine", rate("specdec_accepted_tokens_per_position_total", w, sel))
    return [
        per_pod("drafts"),
        per_pod("draft_tokens"),
        per_pod("accepted_tokens"),
        per_pod("generation_tokens"),
        _record(names.pod("acceptance_rate", ratio_op), guarded_ratio(accepted, draft_tokens)),
        _record(names.pod("acceptance_length", mean_op), "1 + " + guarded_ratio(accepted, drafts)),
        _record(names.pod("draft_output_share", ratio_op), guarded_ratio(accepted, generated)),
        _record(names.engine("acceptance_rate", ratio_op), guarded_ratio(
            engine_accepted, rate("specdec_draft_tokens_total", w, sel))),
        _record(names.engine("acceptance_length", mean_op), "1 + " + guarded_ratio(
            engine_accepted, rate("specdec_drafts_total", w, sel))),
        _record(f"{POSITION}:specdec_position_acceptance_rate:{ratio_op}",
                guarded_ratio(per_position, drafts, "ignoring (position) group_left ()")),
    ]


def bucket_recording_rules(settings: Settings) -> list[Rule]:
    """Per pod, model and temperature bucket, from the request tap's counters and histograms."""
    names, sel, w = Names.of(settings), settings.sidecar_selector, settings.rate_window
    accepted = rate("specdec_request_accepted_tokens_total", w, sel)
    observed = rate("specdec_request_acceptance_rate_count", w, sel)
    buckets = rate("specdec_request_acceptance_rate_bucket", w, sel)
    rules = [
        _record(names.bucket("request_draft_tokens"),
                rate("specdec_request_draft_tokens_total", w, sel)),
        _record(names.bucket("request_acceptance_rate", f"ratio_{names.window}"),
                guarded_ratio(accepted, names.bucket("request_draft_tokens"))),
        _record(names.bucket("request_acceptance_length", f"mean_{names.window}"),
                "1 + " + guarded_ratio(accepted, rate("specdec_request_drafts_total", w, sel))),
    ]
    for quantile in sorted({0.1, 0.5, 0.9, settings.thresholds.tail_quantile}):
        expr = f"histogram_quantile({_num(quantile)}, {buckets})\nand\n{observed} > 0"
        rules.append(_record(names.bucket("request_acceptance_rate", f"quantile_{names.window}"),
                             expr, {"quantile": _num(quantile)}))
    return rules


def comparison_recording_rules(settings: Settings) -> list[Rule]:
    """Per model across its pods: pods are renamed on every rollout, models are not."""
    names, sel = Names.of(settings), settings.sidecar_selector
    window, offset = settings.comparison_window, settings.comparison_offset

    def model_rate(counter: str, shift: str = "") -> str:
        return sum_by(MODEL_LABELS, rate(f"specdec_{counter}_total", window, sel, offset=shift))

    rules = []
    for operation, shift in ((names.comparison, ""), (names.offset, offset)):
        draft_tokens = model_rate("draft_tokens", shift)
        rules.append(_record(names.model("draft_tokens", operation), draft_tokens))
        rules.append(_record(names.model("acceptance_rate", f"ratio_{operation}"),
                             guarded_ratio(model_rate("accepted_tokens", shift), draft_tokens)))
    return rules


def alerting_rules(settings: Settings) -> list[Rule]:
    return [
        *acceptance_alerts(settings),
        *bucket_alerts(settings),
        *efficiency_alerts(settings),
        *health_alerts(settings),
    ]


def acceptance_alerts(settings: Settings) -> list[Rule]:
    names, t = Names.of(settings), settings.thresholds
    ratio_op, w = f"ratio_{names.window}", settings.rate_window
    low = (f"{names.pod('acceptance_rate', ratio_op)} < {_num(t.acceptance_rate)}\n"
           f"and\n{names.pod('draft_tokens')} >= {_num(t.min_draft_tokens_per_second)}")
    dropped = (f"{names.model('acceptance_rate', f'ratio_{names.offset}')}\n"
               f"- {names.model('acceptance_rate', f'ratio_{names.comparison}')}\n"
               f"> {_num(t.acceptance_drop)}\n"
               f"and\n{names.model('draft_tokens', names.comparison)}"
               f" >= {_num(t.min_draft_tokens_per_second)}\n"
               f"and\n{names.model('draft_tokens', names.offset)}"
               f" >= {_num(t.min_draft_tokens_per_second)}")
    return [
        _alert(settings, "SpecDecodeAcceptanceLow", low,
               summary="Speculative decoding acceptance is low: drafting is likely a net loss.",
               description=(
                   "Draft acceptance of model {{ $labels.model_name }} on {{ $labels.instance }} "
                   "({{ $labels.namespace }}) is {{ $value | humanizePercentage }} over the "
                   f"last {w}, below {_pct(t.acceptance_rate)}, with at least "
                   f"{_num(t.min_draft_tokens_per_second)} draft tokens/s. Below this rate "
                   "speculation usually makes generation slower than plain decoding."),
               dashboard_vars=("model_name", "instance")),
        _alert(settings, "SpecDecodeAcceptanceDropped", dropped,
               summary="Acceptance fell against the same hour yesterday.",
               description=(
                   "Draft acceptance of model {{ $labels.model_name }} in {{ $labels.namespace }} "
                   f"over the last {settings.comparison_window} is "
                   "{{ $value | humanizePercentage }} lower in absolute terms than at the same "
                   f"time {settings.comparison_offset} ago, a drop of more than "
                   f"{t.acceptance_drop * 100:g} points. "
                   "A quantised target or a changed draft model is the usual cause."),
               dashboard_vars=("model_name",)),
    ]


def bucket_alerts(settings: Settings) -> list[Rule]:
    names, t, sel, w = Names.of(settings), settings.thresholds, settings.sidecar_selector, \
        settings.rate_window
    ratio = names.bucket("request_acceptance_rate", f"ratio_{names.window}")
    quantile = names.bucket("request_acceptance_rate", f"quantile_{names.window}")
    low = (f"{ratio} < {_num(t.acceptance_rate)}\n"
           f"and\n{names.bucket('request_draft_tokens')}"
           f" >= {_num(t.min_bucket_draft_tokens_per_second)}")
    tail = (f'{quantile}{{quantile="{_num(t.tail_quantile)}"}} < {_num(t.tail_acceptance_rate)}\n'
            f"and ignoring (quantile)\n"
            f"{rate('specdec_request_acceptance_rate_count', w, sel)}"
            f" >= {_num(t.min_bucket_requests_per_second)}")
    p = f"P{round(t.tail_quantile * 100)}"
    return [
        _alert(settings, "SpecDecodeBucketAcceptanceLow", low,
               summary="Acceptance is low for one temperature bucket.",
               description=(
                   "Requests of model {{ $labels.model_name }} on {{ $labels.instance }} "
                   "({{ $labels.namespace }}) in temperature bucket "
                   "{{ $labels.temperature_bucket }} accept {{ $value | humanizePercentage }} "
                   f"of their draft tokens over the last {w}, below "
                   f"{_pct(t.acceptance_rate)}: speculation is a net loss for this traffic."),
               dashboard_vars=("model_name", "instance", "temperature_bucket")),
        _alert(settings, "SpecDecodeBucketAcceptanceTailLow", tail,
               summary=f"The {p} of per-request acceptance is low in a temperature bucket.",
               description=(
                   f"The {p} of per-request acceptance for model {{{{ $labels.model_name }}}} "
                   "on {{ $labels.instance }} ({{ $labels.namespace }}) in temperature bucket "
                   "{{ $labels.temperature_bucket }} is {{ $value | humanizePercentage }}, "
                   f"below {_pct(t.tail_acceptance_rate)}: at least "
                   f"{_pct(t.tail_quantile)} of these requests are slowed down by speculation."),
               dashboard_vars=("model_name", "instance", "temperature_bucket")),
    ]


def efficiency_alerts(settings: Settings) -> list[Rule]:
    names, t, sel = Names.of(settings), settings.thresholds, settings.sidecar_selector
    drafting = f"{names.pod('draft_tokens')} >= {_num(t.min_draft_tokens_per_second)}"
    speedup = f"specdec_estimated_speedup{{{sel}}} < {_num(t.speedup)}\nand\n{drafting}"
    coverage = (f"specdec_request_coverage_ratio{{{sel}}} < {_num(t.coverage_ratio)}\n"
                f"and\n{drafting}")
    not_drafting = (f"specdec_spec_decode_enabled{{{sel}}} == 1\n"
                    f"and\n{names.pod('generation_tokens')}"
                    f" >= {_num(t.min_generation_tokens_per_second)}\n"
                    f"and\n{names.pod('drafts')} == 0")
    return [
        _alert(settings, "SpecDecodeSpeedupBelowOne", speedup,
               summary="Modelled speedup of speculative decoding is below 1.",
               description=(
                   "The sidecar models a speedup of {{ $value | printf \"%.2f\" }} for model "
                   "{{ $labels.model_name }} on {{ $labels.instance }} ({{ $labels.namespace }}): "
                   "the tokens accepted per step do not pay for the cost of drafting."),
               dashboard_vars=("model_name", "instance")),
        _alert(settings, "SpecDecodeNotDrafting", not_drafting,
               summary="Speculative decoding is configured but nothing is drafted.",
               description=(
                   "Model {{ $labels.model_name }} on {{ $labels.instance }} "
                   "({{ $labels.namespace }}) exposes the speculative-decoding families and "
                   f"generates tokens, but no verify step had a draft over the last "
                   f"{settings.rate_window}: the drafter proposes nothing."),
               dashboard_vars=("model_name", "instance")),
        _alert(settings, "SpecDecodeTapCoverageLow", coverage,
               summary="The request tap sees too little of the drafted traffic.",
               description=(
                   "The tap attributed {{ $value | humanizePercentage }} of the draft tokens "
                   "vLLM counted for model {{ $labels.model_name }} on {{ $labels.instance }} "
                   f"({{{{ $labels.namespace }}}}), below {_pct(t.coverage_ratio)}: the "
                   "per-temperature figures describe only part of the traffic."),
               dashboard_vars=("model_name", "instance")),
    ]


def health_alerts(settings: Settings) -> list[Rule]:
    sel = settings.sidecar_selector
    return [
        _alert(settings, "SpecDecodeSidecarDown", f"up{{{sel}}} == 0",
               summary="Prometheus cannot scrape the speculative-decoding sidecar.",
               description=(
                   "The sidecar target {{ $labels.instance }} ({{ $labels.namespace }}/"
                   "{{ $labels.pod }}) has been down. The tap is on the request path, so "
                   "requests to this pod are probably failing too."),
               dashboard_vars=("instance",)),
        _alert(settings, "SpecDecodeSidecarAbsent", f"absent(up{{{sel}}})",
               summary="No speculative-decoding sidecar target is discovered.",
               description=(
                   f"Prometheus has no target matching {{{sel}}}: the PodMonitor is not "
                   "selected, or no pod runs the sidecar. No speculative-decoding alert can fire."),
               dashboard_vars=()),
        _alert(settings, "SpecDecodeVLLMUnreachable", f"specdec_up{{{sel}}} == 0",
               summary="The sidecar cannot scrape vLLM's /metrics.",
               description=(
                   "The sidecar {{ $labels.instance }} ({{ $labels.namespace }}/{{ $labels.pod }})"
                   " fails to scrape vLLM in its pod (see specdec_scrape_failures_total by "
                   "reason). vLLM is down, overloaded or not serving /metrics."),
               dashboard_vars=("instance",)),
    ]


def record_names(groups: list[RuleGroup]) -> frozenset[str]:
    return frozenset(rule["record"] for group in groups for rule in group["rules"]
                     if "record" in rule)


def _record(name: str, expr: str, labels: dict[str, str] | None = None) -> Rule:
    rule: Rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def _alert(settings: Settings, name: str, expr: str, *, summary: str, description: str,
           dashboard_vars: tuple[str, ...]) -> Rule:
    policy = settings.policy(name)
    return {
        "alert": name,
        "expr": expr,
        "for": policy.for_,
        "labels": {"severity": policy.severity},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{settings.links.runbook}#{name.lower()}",
            "dashboard_url": _dashboard_url(settings, dashboard_vars),
        },
    }


_DASHBOARD_VARIABLE = {"model_name": "model", "instance": "instance",
                       "temperature_bucket": "bucket"}


def _dashboard_url(settings: Settings, labels: tuple[str, ...]) -> str:
    links = settings.links
    url = f"{links.grafana}/d/{links.dashboard_uid}/{links.dashboard_slug}"
    query = "&".join(f"var-{_DASHBOARD_VARIABLE[label]}={{{{ $labels.{label} | urlquery }}}}"
                     for label in labels)
    return f"{url}?{query}" if query else url


def _num(value: float) -> str:
    """0.5 -> '0.5', 10.0 -> '10': thresholds read the way they are written in the config."""
    return f"{value:g}"


def _pct(value: float) -> str:
    return f"{value * 100:g}%"

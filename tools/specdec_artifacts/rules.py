"""Prometheus recording and alerting rules for speculative decoding, built from the settings.

Recording rules are named `level:metric:operation`. Levels: `instance_model_name` (one scrape
target, engines summed), `..._engine`, `..._position`, `..._temperature_bucket`, and
`namespace_model_name` (every pod of a model in a namespace, and cluster where configured).
The alerts implement the rows of the verdict's decision table (core/verdict.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from specdec_artifacts.promql import guarded_ratio, rate, selector, sum_by, sum_without
from specdec_artifacts.settings import Settings, duration_seconds
from specdec_exporter.core import probe_names
from specdec_exporter.core.model import MEASURED_OR_SET, DraftCostSource
from specdec_exporter.core.verdict import NET_LOSS_BELOW
from specdec_exporter.probe.families import ERROR_LOG_INTERVAL

Rule = dict[str, Any]
RuleGroup = dict[str, Any]

POD = "instance_model_name"
ENGINE = "instance_model_name_engine"
POSITION = "instance_model_name_position"
BUCKET = "instance_model_name_temperature_bucket"
MODEL = "namespace_model_name"

INHIBITING_ALERTS = ("SpecDecodeSidecarDown", "SpecDecodeVLLMUnreachable", "SpecDecodeVLLMNeverUp")
INHIBITED_ALERTS = (
    "SpecDecodeAcceptanceLow",
    "SpecDecodeBucketAcceptanceLow",
    "SpecDecodeBucketAcceptanceTailLow",
    "SpecDecodeSpeedupBelowOne",
    "SpecDecodeSpeedupBelowOneAssumedCost",
    "SpecDecodeNotDrafting",
    "SpecDecodeTemperatureSplitCoverageLow",
    "SpecDecodeProbeSplitOff",
)
"""Per-pod alerts whose numbers cannot be trusted while that pod's sidecar or vLLM is down (the
probe's split state is the last one seen, kept while vLLM does not answer)."""
FLAT_WHILE_DOWN = ("SpecDecodeProbeErrors", "SpecDecodeProbeFilesUnreadable")
"""Per-pod alerts left out of the inhibition: their rates go flat while vLLM does not answer (no
poll re-reads the probe's errors or its files), so they resolve by themselves."""
RUNBOOK_ANCHOR = "#"
"""runbook_url = the runbook's URL, this, the alert's name in lower case (one section each)."""
DASHBOARD_PATH = "/d/"
"""dashboard_url = Grafana's base URL, this, the dashboard's uid and slug, the variables."""
ALERT_PREFIX = "SpecDecode"
"""Every alert of ours starts with it: the Alertmanager routes match on it."""
assert set(MEASURED_OR_SET) < set(get_args(DraftCostSource))
TAP_ENABLED = "specdec_tap_enabled"
"""1 while the sidecar runs its request tap (--proxy-listen): the sidecar-down text reads it."""
TAP_LOOKBACK = "1h"
"""How far back the sidecar-down text looks for the down sidecar's last TAP_ENABLED."""


@dataclass(frozen=True)
class Names:
    """Recording-rule names; the operation suffix carries the configured window."""

    window: str
    comparison: str
    offset: str

    @classmethod
    def of(cls, settings: Settings) -> Names:
        comparison = f"rate{settings.windows.comparison}"
        return cls(
            window=f"rate{settings.windows.rate}",
            comparison=comparison,
            offset=f"{comparison}_offset{settings.windows.comparison_offset}",
        )

    def pod(self, metric: str, operation: str = "") -> str:
        return f"{POD}:specdec_{metric}:{operation or self.window}"

    def engine(self, metric: str, operation: str) -> str:
        return f"{ENGINE}:specdec_{metric}:{operation}"

    def bucket(self, metric: str, operation: str = "") -> str:
        return f"{BUCKET}:specdec_{metric}:{operation or self.window}"

    def model(self, metric: str, operation: str) -> str:
        return f"{MODEL}:specdec_{metric}:{operation}"

    @property
    def threshold(self) -> str:
        """t per pod and model: the configured acceptance threshold, by model, method or default."""
        return f"{POD}:specdec_acceptance_threshold:config"


def model_labels(settings: Settings) -> str:
    """`by` labels of the per-model level: the cluster label (if any), namespace, model_name."""
    return ", ".join((*settings.cluster, "namespace", "model_name"))


def rule_groups(settings: Settings) -> list[RuleGroup]:
    """The whole rule file: recording groups first, then the alerts that read them."""
    return [
        {"name": "specdec.recording.model", "rules": model_recording_rules(settings)},
        {"name": "specdec.recording.bucket", "rules": bucket_recording_rules(settings)},
        {"name": "specdec.recording.day-over-day", "rules": comparison_recording_rules(settings)},
        {"name": "specdec.alerts", "rules": alerting_rules(settings)},
    ]


def model_recording_rules(settings: Settings) -> list[Rule]:
    """Per pod and model (engines summed before dividing), per engine, per position, the
    threshold t per pod, and the per-model figures the fleet view ranks."""
    names, sel, w = Names.of(settings), settings.selectors.sidecar, settings.windows.rate
    ratio_op, mean_op = f"ratio_{names.window}", f"mean_{names.window}"

    def per_pod(counter: str) -> Rule:
        expr = sum_without("engine", rate(f"specdec_{counter}_total", w, sel))
        return _record(names.pod(counter), expr)

    drafts, draft_tokens = names.pod("drafts"), names.pod("draft_tokens")
    accepted, generated = names.pod("accepted_tokens"), names.pod("generation_tokens")
    engine_accepted = rate("specdec_accepted_tokens_total", w, sel)
    per_position = sum_without("engine", rate("specdec_accepted_tokens_per_position_total", w, sel))
    by_model = model_labels(settings)
    return [
        per_pod("drafts"),
        per_pod("draft_tokens"),
        per_pod("accepted_tokens"),
        per_pod("generation_tokens"),
        _record(names.pod("acceptance_rate", ratio_op), guarded_ratio(accepted, draft_tokens)),
        _record(names.pod("acceptance_length", mean_op), "1 + " + guarded_ratio(accepted, drafts)),
        _record(names.pod("draft_output_share", ratio_op), guarded_ratio(accepted, generated)),
        _record(
            names.engine("acceptance_rate", ratio_op),
            guarded_ratio(engine_accepted, rate("specdec_draft_tokens_total", w, sel)),
        ),
        _record(
            names.engine("acceptance_length", mean_op),
            "1 + " + guarded_ratio(engine_accepted, rate("specdec_drafts_total", w, sel)),
        ),
        _record(
            f"{POSITION}:specdec_position_acceptance_rate:{ratio_op}",
            guarded_ratio(per_position, drafts, "ignoring (position) group_left ()"),
        ),
        _record(names.threshold, threshold_expr(settings)),
        _record(
            names.model("acceptance_rate", ratio_op),
            guarded_ratio(sum_by(by_model, accepted), sum_by(by_model, draft_tokens)),
        ),
        _record(
            names.model("estimated_speedup", "min"),
            f"min by ({by_model}) ({selector('specdec_estimated_speedup', sel)})",
        ),
    ]


def threshold_expr(settings: Settings, sel: str = "") -> str:
    """t for every pod and model the sidecar reports, most specific first: by model, by
    --speculative-method (`specdec_speculative_info`'s `method`), else the default. `sel`:
    the matchers of the sidecar's series (the configured selector by default)."""
    t, sel = settings.thresholds, sel or settings.selectors.sidecar

    def constant(value: float, *matchers: str) -> str:
        info = selector("specdec_speculative_info", sel, *matchers)
        return f"{_num(value)} * group without (method) ({info})"

    parts = [
        constant(value, f"model_name={_quoted(model)}")
        for model, value in sorted(settings.acceptance_rate_by_model.items())
    ]
    parts += [
        constant(value, f"method={_quoted(method)}")
        for method, value in sorted(t.acceptance_rate_by_method.items())
    ]
    parts.append(constant(t.acceptance_rate))
    return "\nor\n".join(parts)


def bucket_recording_rules(settings: Settings) -> list[Rule]:
    """Per pod, model and temperature bucket, from the request tap's counters and histograms."""
    names, sel, w = Names.of(settings), settings.selectors.sidecar, settings.windows.rate
    accepted = rate("specdec_request_accepted_tokens_total", w, sel)
    observed = rate("specdec_request_acceptance_rate_count", w, sel)
    buckets = rate("specdec_request_acceptance_rate_bucket", w, sel)
    rules = [
        _record(
            names.bucket("request_draft_tokens"), rate("specdec_request_draft_tokens_total", w, sel)
        ),
        _record(
            names.bucket("request_acceptance_rate", f"ratio_{names.window}"),
            guarded_ratio(accepted, names.bucket("request_draft_tokens")),
        ),
        _record(
            names.bucket("request_acceptance_length", f"mean_{names.window}"),
            "1 + " + guarded_ratio(accepted, rate("specdec_request_drafts_total", w, sel)),
        ),
    ]
    for quantile in sorted({0.1, 0.5, 0.9, settings.thresholds.tail_quantile}):
        expr = f"histogram_quantile({_num(quantile)}, {buckets})\nand\n{observed} > 0"
        rules.append(
            _record(
                names.bucket("request_acceptance_rate", f"quantile_{names.window}"),
                expr,
                {"quantile": _num(quantile)},
            )
        )
    return rules


def comparison_recording_rules(settings: Settings) -> list[Rule]:
    """Per model across its pods: pods are renamed on every rollout, models are not."""
    names, sel = Names.of(settings), settings.selectors.sidecar
    window, offset = settings.windows.comparison, settings.windows.comparison_offset
    by_model = model_labels(settings)

    def model_rate(counter: str, shift: str = "") -> str:
        return sum_by(by_model, rate(f"specdec_{counter}_total", window, sel, offset=shift))

    rules = []
    for operation, shift in ((names.comparison, ""), (names.offset, offset)):
        draft_tokens = model_rate("draft_tokens", shift)
        rules.append(_record(names.model("draft_tokens", operation), draft_tokens))
        rules.append(
            _record(
                names.model("acceptance_rate", f"ratio_{operation}"),
                guarded_ratio(model_rate("accepted_tokens", shift), draft_tokens),
            )
        )
    return rules


def alerting_rules(settings: Settings) -> list[Rule]:
    return [
        *acceptance_alerts(settings),
        *bucket_alerts(settings),
        *efficiency_alerts(settings),
        *health_alerts(settings),
        *probe_alerts(settings),
    ]


class Lookup:
    """Alert-template fragments that query the figures of the alert's own pod and model."""

    def __init__(self, settings: Settings) -> None:
        names = Names.of(settings)
        self._target = ("job", "instance", *settings.cluster)
        self.acceptance = self._value(
            names.pod("acceptance_rate", f"ratio_{names.window}"), "humanizePercentage", model=True
        )
        self.threshold = self._value(names.threshold, "humanizePercentage", model=True)
        self.speedup = self._value("specdec_estimated_speedup", 'printf "%.2f"', model=True)
        self.cost = self._value("specdec_draft_cost_ratio", 'printf "%g"', model=False)
        self.cost_source = self._label("specdec_draft_cost_ratio", "source", model=False)
        self.split_source = self._query(
            "specdec_temperature_split_info",
            model=False,
            found=(
                '{{ $source := . | first | label "source" }}'
                '{{ if eq $source "probe" }}the engine probe'
                '{{ else if eq $source "tap" }}the request tap'
                "{{ else }}{{ $source }}{{ end }}"
            ),
            missing="unknown",
        )
        self.gain_or_loss = self._query(
            "specdec_estimated_speedup",
            model=True,
            found=(
                f"{{{{ if lt (. | first | value) {NET_LOSS_BELOW:.1f} }}}}a net loss"
                "{{ else }}still a gain{{ end }} (modelled speedup "
                '{{ . | first | value | printf "%.2f" }})'
            ),
            missing="of unknown worth (no modelled speedup: k unknown)",
        )

    def _query(
        self, metric: str, *, model: bool, found: str, missing: str, around: str = "{}"
    ) -> str:
        """`found` (the query's result as `.`) if the query returns a series, else `missing`.
        The query is `metric` with the alert's own target (and model) labels, put in `around`'s
        `{}` (e.g. `last_over_time({}[1h])`)."""
        labels = (*self._target, "model_name") if model else self._target
        matchers = ", ".join(f"{label}=%q" for label in labels)
        values = " ".join(f"$labels.{label}" for label in labels)
        query = around.replace("{}", f"{metric}{{{matchers}}}")
        return (
            f"{{{{ with printf `{query}` {values} | query }}}}"
            f"{found}{{{{ else }}}}{missing}{{{{ end }}}}"
        )

    def _value(self, metric: str, format_: str, *, model: bool) -> str:
        return self._query(
            metric, model=model, found=f"{{{{ . | first | value | {format_} }}}}", missing="unknown"
        )

    def _label(self, metric: str, label: str, *, model: bool) -> str:
        return self._query(
            metric, model=model, found=f'{{{{ . | first | label "{label}" }}}}', missing="unknown"
        )

    def tap_text(self, *, on: str, off: str, unknown: str) -> str:
        """`on` or `off` by the down sidecar's last TAP_ENABLED, `unknown` without one."""
        return self._query(
            TAP_ENABLED,
            around=f"last_over_time({{}}[{TAP_LOOKBACK}])",
            model=False,
            found=f"{{{{ if eq (. | first | value) 1.0 }}}}{on}{{{{ else }}}}{off}{{{{ end }}}}",
            missing=unknown,
        )


def acceptance_alerts(settings: Settings) -> list[Rule]:
    names, t, look = Names.of(settings), settings.thresholds, Lookup(settings)
    ratio_op, w = f"ratio_{names.window}", settings.windows.rate
    low = (
        f"{names.pod('acceptance_rate', ratio_op)}\n< {names.threshold}\n"
        f"and\n{names.pod('draft_tokens')} >= {_num(t.min_draft_tokens_per_second)}"
    )
    dropped = (
        f"{names.model('acceptance_rate', f'ratio_{names.offset}')}\n"
        f"- {names.model('acceptance_rate', f'ratio_{names.comparison}')}\n"
        f"> {_num(t.acceptance_drop)}\n"
        f"and\n{names.model('draft_tokens', names.comparison)}"
        f" >= {_num(t.min_draft_tokens_per_second)}\n"
        f"and\n{names.model('draft_tokens', names.offset)}"
        f" >= {_num(t.min_draft_tokens_per_second)}"
    )
    return [
        _alert(
            settings,
            "SpecDecodeAcceptanceLow",
            low,
            summary="Speculative decoding acceptance is below its threshold t.",
            description=(
                "Draft acceptance of model {{ $labels.model_name }} on {{ $labels.instance }} "
                "({{ $labels.namespace }}) is {{ $value | humanizePercentage }} over the "
                f"last {w}, below its threshold t = {look.threshold}, with at least "
                f"{_num(t.min_draft_tokens_per_second)} draft tokens/s. By the model, "
                f"speculation is {look.gain_or_loss}, with c = {look.cost} "
                f"(source: {look.cost_source}). The drafter lost acceptance: find the cause "
                "(runbook). c from `method` or `default` is an assumption; "
                "`specdec-exporter calibrate` measures it."
            ),
            dashboard_vars=("namespace", "pod", "model_name"),
        ),
        _alert(
            settings,
            "SpecDecodeAcceptanceDropped",
            dropped,
            summary="Acceptance fell against the same hour yesterday.",
            description=(
                "Draft acceptance of model {{ $labels.model_name }} in {{ $labels.namespace }} "
                f"over the last {settings.windows.comparison} is "
                "{{ $value | humanizePercentage }} lower in absolute terms than at the same "
                f"time {settings.windows.comparison_offset} ago, a drop of more than "
                f"{t.acceptance_drop * 100:g} points. "
                "A quantised target or a changed draft model is the usual cause."
            ),
            dashboard_vars=("namespace", "model_name"),
        ),
    ]


def bucket_alerts(settings: Settings) -> list[Rule]:
    names, t, look = Names.of(settings), settings.thresholds, Lookup(settings)
    sel, w = settings.selectors.sidecar, settings.windows.rate
    ratio = names.bucket("request_acceptance_rate", f"ratio_{names.window}")
    quantile = names.bucket("request_acceptance_rate", f"quantile_{names.window}")
    low = (
        f"{ratio}\n< ignoring (temperature_bucket) group_left ()\n{names.threshold}\n"
        f"and\n{names.bucket('request_draft_tokens')}"
        f" >= {_num(t.min_bucket_draft_tokens_per_second)}"
    )
    tail = (
        f'{quantile}{{quantile="{_num(t.tail_quantile)}"}} < {_num(t.tail_acceptance_rate)}\n'
        f"and ignoring (quantile)\n"
        f"{rate('specdec_request_acceptance_rate_count', w, sel)}"
        f" >= {_num(t.min_bucket_requests_per_second)}"
    )
    p = f"P{round(t.tail_quantile * 100)}"
    return [
        _alert(
            settings,
            "SpecDecodeBucketAcceptanceLow",
            low,
            summary="Acceptance is below its threshold for one temperature bucket.",
            description=(
                "Requests of model {{ $labels.model_name }} on {{ $labels.instance }} "
                "({{ $labels.namespace }}) in temperature bucket "
                "{{ $labels.temperature_bucket }} accept {{ $value | humanizePercentage }} "
                f"of their draft tokens over the last {w}, below the model's threshold "
                f"t = {look.threshold}. The whole pod's modelled speedup is {look.speedup} "
                f"(c = {look.cost}). This traffic's temperature is the client's choice: see "
                "the runbook before acting."
            ),
            dashboard_vars=("namespace", "pod", "model_name", "temperature_bucket"),
        ),
        _alert(
            settings,
            "SpecDecodeBucketAcceptanceTailLow",
            tail,
            summary=f"The {p} of per-request acceptance is low in a temperature bucket.",
            description=(
                f"The {p} of per-request acceptance for model {{{{ $labels.model_name }}}} "
                "on {{ $labels.instance }} ({{ $labels.namespace }}) in temperature bucket "
                "{{ $labels.temperature_bucket }} is {{ $value | humanizePercentage }}, "
                f"below {_pct(t.tail_acceptance_rate)}: at least "
                f"{_pct(t.tail_quantile)} of these requests accept less than that share of "
                "their draft tokens."
            ),
            dashboard_vars=("namespace", "pod", "model_name", "temperature_bucket"),
        ),
    ]


def efficiency_alerts(settings: Settings) -> list[Rule]:
    names, t, look = Names.of(settings), settings.thresholds, Lookup(settings)
    sel = settings.selectors.sidecar
    drafting = f"{names.pod('draft_tokens')} >= {_num(t.min_draft_tokens_per_second)}"
    acceptance = names.pod("acceptance_rate", f"ratio_{names.window}")
    target = ", ".join(("job", "instance", *settings.cluster))
    sources = "|".join(MEASURED_OR_SET)

    def speedup(cost_matcher: str) -> str:
        cost = selector("specdec_draft_cost_ratio", sel, cost_matcher)
        return (
            f"{selector('specdec_estimated_speedup', sel)} < {_num(NET_LOSS_BELOW)}\n"
            f"and\n{acceptance} >= {names.threshold}\n"
            f"and\n{drafting}\n"
            f"and on ({target})\n{cost}"
        )

    coverage = (
        f"{selector('specdec_request_coverage_ratio', sel)} < {_num(t.coverage_ratio)}\n"
        f"and\n{drafting}"
    )
    not_drafting = (
        f"{selector('specdec_spec_decode_enabled', sel)} == 1\n"
        f"and\n{names.pod('generation_tokens')}"
        f" >= {_num(t.min_generation_tokens_per_second)}\n"
        f"and\n{names.pod('drafts')} == 0"
    )
    loss = (
        'The sidecar models a speedup of {{ $value | printf "%.2f" }} for model '
        "{{ $labels.model_name }} on {{ $labels.instance }} ({{ $labels.namespace }}) while "
        f"its acceptance {look.acceptance} is at or above its threshold t = {look.threshold}"
    )
    return [
        _alert(
            settings,
            "SpecDecodeSpeedupBelowOne",
            speedup(f'source=~"{sources}"'),
            summary="Speculative decoding is a net loss by the model (modelled speedup below 1), "
            "with a measured or set draft cost.",
            description=(
                f"{loss}, with c = {look.cost} (source: {look.cost_source}: measured by "
                "`calibrate` or set by a person): the tokens accepted per step do not pay for "
                "drafting, so generation is slower than plain decoding by the model."
            ),
            dashboard_vars=("namespace", "pod", "model_name"),
        ),
        _alert(
            settings,
            "SpecDecodeSpeedupBelowOneAssumedCost",
            speedup(f'source!~"{sources}"'),
            summary="The modelled speedup is below 1, but it rests on an assumed draft cost: "
            "measure c before acting.",
            description=(
                f"{loss}, with c = {look.cost} (source: {look.cost_source}: an assumption, "
                "nobody measured it). Whether speculation loses time by the model depends "
                "on that c: measure it (`specdec-exporter calibrate`, runbook); with a measured "
                "c the same figures page as SpecDecodeSpeedupBelowOne."
            ),
            dashboard_vars=("namespace", "pod", "model_name"),
        ),
        _alert(
            settings,
            "SpecDecodeNotDrafting",
            not_drafting,
            summary="Speculative decoding is configured but nothing is drafted.",
            description=(
                "Model {{ $labels.model_name }} on {{ $labels.instance }} "
                "({{ $labels.namespace }}) exposes the speculative-decoding families and "
                f"generates tokens, but no verify step had a draft over the last "
                f"{settings.windows.rate}: the drafter proposes nothing."
            ),
            dashboard_vars=("namespace", "pod", "model_name"),
        ),
        _alert(
            settings,
            "SpecDecodeTemperatureSplitCoverageLow",
            coverage,
            summary="The temperature split covers too little of the drafted traffic.",
            description=(
                f"The temperature split's source ({look.split_source}) attributed "
                "{{ $value | humanizePercentage }} of the draft tokens vLLM counted for model "
                "{{ $labels.model_name }} on {{ $labels.instance }} "
                f"({{{{ $labels.namespace }}}}), below {_pct(t.coverage_ratio)}: the "
                "per-temperature figures describe only part of the traffic."
            ),
            dashboard_vars=("namespace", "pod", "model_name"),
        ),
    ]


def health_alerts(settings: Settings) -> list[Rule]:
    """The monitor's own health: tickets, never pages (vLLM's availability is paged by the
    service's own alerts; these say the speculative-decoding monitor of a pod is blind)."""
    sel, look = settings.selectors.sidecar, Lookup(settings)
    grace = settings.policy("SpecDecodeVLLMNeverUp").for_
    blind = "its speculative-decoding alerts are inhibited: the monitor of this pod is blind."
    tap = look.tap_text(
        on="Its request tap is on the request path: requests the Service sends to this pod "
        "fail while the sidecar is down (vLLM's own availability alerts see them); the "
        "runbook says how to take the tap out of the path.",
        off="Its request tap is off (engine probe or no split): vLLM serves as usual; only "
        "the monitoring of this pod is blind.",
        unknown=f"Whether its request tap is on is unknown (no scrape in the last "
        f"{TAP_LOOKBACK}): if the Service targets the tap, requests to this pod fail too.",
    )
    return [
        _alert(
            settings,
            "SpecDecodeSidecarDown",
            f"{selector('up', sel)} == 0",
            summary="Prometheus cannot scrape the speculative-decoding sidecar.",
            description=(
                "The sidecar target {{ $labels.instance }} ({{ $labels.namespace }}/"
                f"{{{{ $labels.pod }}}}) has been down. {tap}"
            ),
            dashboard_vars=("namespace", "pod"),
        ),
        _alert(
            settings,
            "SpecDecodeSidecarAbsent",
            f"absent({selector('up', sel)})",
            summary="No speculative-decoding sidecar target is discovered.",
            description=(
                f"Prometheus has no target matching {{{sel}}}: the PodMonitor is not "
                "selected, or no pod runs the sidecar. No speculative-decoding alert can fire: "
                "the monitor is blind."
            ),
            dashboard_vars=(),
        ),
        _alert(
            settings,
            "SpecDecodeVLLMUnreachable",
            f"{selector('specdec_up', sel)} == 0\n"
            f"and\n{selector('specdec_vllm_ever_up', sel)} == 1",
            summary="The sidecar can no longer scrape vLLM's /metrics: its monitor is blind.",
            description=(
                "The sidecar {{ $labels.instance }} ({{ $labels.namespace }}/{{ $labels.pod }})"
                " reached vLLM in its pod before and now fails to scrape it (see "
                "specdec_scrape_failures_total by reason): vLLM is down, overloaded or not "
                "serving /metrics. vLLM's own availability alerts page for that; " + blind
            ),
            dashboard_vars=("namespace", "pod"),
        ),
        _alert(
            settings,
            "SpecDecodeVLLMNeverUp",
            f"{selector('specdec_vllm_ever_up', sel)} == 0",
            summary="vLLM has not come up since the sidecar started: its monitor is blind.",
            description=(
                "The sidecar {{ $labels.instance }} ({{ $labels.namespace }}/{{ $labels.pod }})"
                f" has not reached vLLM once in {grace}, longer than vLLM's startup budget: "
                "vLLM is stuck loading, crash-looping or misconfigured. vLLM's own "
                "availability alerts page for that; " + blind
            ),
            dashboard_vars=("namespace", "pod"),
        ),
    ]


def probe_alerts(settings: Settings) -> list[Rule]:
    """The engine probe's health, from the sidecar's re-export of vLLM's specdec_probe_info and
    specdec_probe_errors_total, as its last successful poll saw them (kept while vLLM does not
    answer: the split-off ticket is inhibited then, and the errors' rate is flat), and the
    sidecar's reads of the probe's files (a poll that cannot reach vLLM reads none: that rate is
    flat too)."""
    sel, w = settings.selectors.sidecar, settings.windows.rate
    off = _quoted(probe_names.OFF)
    split_off = "\nor\n".join(
        selector("specdec_engine_probe_info", sel, f"{label}={off}")
        for label in (probe_names.TEMPERATURE_SPLIT, probe_names.BATCH_SPLIT)
    )
    pod = "{{ $labels.instance }} ({{ $labels.namespace }}/{{ $labels.pod }})"
    temperature_off = f"{{{{ if eq $labels.{probe_names.TEMPERATURE_SPLIT} {off} }}}}"
    batch_off = f"{{{{ if eq $labels.{probe_names.BATCH_SPLIT} {off} }}}}"
    finished = f"{{{{ if eq $labels.hook {_quoted(probe_names.HOOK_FINISHED)} }}}}"
    record = f"{{{{ else if eq $labels.hook {_quoted(probe_names.HOOK_RECORD)} }}}}"
    return [
        _alert(
            settings,
            "SpecDecodeProbeSplitOff",
            split_off,
            summary="The engine probe inside vLLM switched a split off: vLLM serves as usual; "
            "the probe's acceptance by temperature or by load is missing.",
            description=(
                f"The engine probe inside vLLM {{{{ $labels.vllm_version }}}} on {pod} runs with "
                "its temperature split {{ $labels.temperature_split }} and its batch split "
                "{{ $labels.batch_split }}. The probe's reason: {{ $labels.reason }}. "
                f"{temperature_off}Acceptance by temperature now comes from the request tap if "
                "one runs, else from nothing. {{ end }}"
                f"{batch_off}Acceptance by running-batch size (the load-level split) is not "
                "counted and its dashboard row is empty. {{ end }}"
                "vLLM itself is unaffected: the probe switched the split off at start-up "
                "instead of failing."
            ),
            dashboard_vars=("namespace", "pod"),
        ),
        _alert(
            settings,
            "SpecDecodeProbeErrors",
            f"{rate('specdec_engine_probe_errors_total', w, sel)} > 0",
            summary="The engine probe inside vLLM is catching errors in its hooks: "
            "its splits undercount.",
            description=(
                f"The engine probe inside vLLM on {pod} caught errors in its "
                "`{{ $labels.hook }}` hook over the last "
                f'{w} ({{{{ $value | printf "%.3g" }}}} per second). {finished}The finished '
                "sequences whose hook erred are missing from the temperature split."
                f"{record}The engine steps whose hook erred are missing from the batch "
                "(load-level) split.{{ end }} vLLM itself is unaffected: the probe counts these "
                "errors and never raises them. vLLM's log has a line per hook at most every "
                f"{ERROR_LOG_INTERVAL // 60} minutes with the error's type and where it was "
                "raised (see the runbook)."
            ),
            dashboard_vars=("namespace", "pod"),
        ),
        _alert(
            settings,
            "SpecDecodeProbeFilesUnreadable",
            # failed polls a second times seconds between polls: the share of polls that failed
            # (the poller keeps its cadence while a poll lasts less than --interval)
            f"{sum_without('reason', rate('specdec_probe_files_read_failures_total', w, sel))}\n"
            f"* {selector('specdec_poll_interval_seconds', sel)}\n"
            f"> {_num(settings.thresholds.probe_files_failed_poll_share)}",
            summary="The sidecar cannot read the engine probe's files: the probe's splits stand "
            "still on their last reading.",
            description=(
                f"The sidecar {pod} could not read the engine probe's files (--probe-dir) in "
                f"{{{{ $value | humanizePercentage }}}} of its polls over the last {w}. Until it "
                "can, it holds the probe's last reading: acceptance by temperature and by load "
                "stands still while vLLM's own counters move on, so the bucket alerts see no "
                "traffic and SpecDecodeTemperatureSplitCoverageLow may fire for the same cause. "
                "Nothing is lost: the probe's counters are cumulative, and the first read that "
                "succeeds brings all it counted meanwhile. vLLM itself is unaffected. The "
                "sidecar's log says why (permissions, an I/O error, a read longer than "
                "--scrape-timeout), one line a cause; `reason` on the counter is timeout or error."
            ),
            dashboard_vars=("namespace", "pod"),
        ),
    ]


def startup_grace_seconds(settings: Settings) -> float:
    """How long a never-up vLLM is treated as still starting (the never-up alert's `for`)."""
    return duration_seconds(settings.policy("SpecDecodeVLLMNeverUp").for_)


def record_names(groups: list[RuleGroup]) -> frozenset[str]:
    return frozenset(
        rule["record"] for group in groups for rule in group["rules"] if "record" in rule
    )


def _record(name: str, expr: str, labels: dict[str, str] | None = None) -> Rule:
    rule: Rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def _alert(
    settings: Settings,
    name: str,
    expr: str,
    *,
    summary: str,
    description: str,
    dashboard_vars: tuple[str, ...],
) -> Rule:
    if not name.startswith(ALERT_PREFIX):
        raise ValueError(f"alert {name} must start with {ALERT_PREFIX}: the routes match on it")
    policy = settings.policy(name)
    rule: Rule = {"alert": name, "expr": expr, "for": policy.for_}
    if policy.keep_firing_for is not None:
        rule["keep_firing_for"] = policy.keep_firing_for
    rule["labels"] = {"severity": policy.severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": f"{settings.links.runbook}{RUNBOOK_ANCHOR}{name.lower()}",
        "dashboard_url": _dashboard_url(settings, (*settings.cluster, *dashboard_vars)),
    }
    return rule


_DASHBOARD_VARIABLE = {
    "model_name": "model",
    "namespace": "namespace",
    "pod": "pod",
    "temperature_bucket": "bucket",
}
"""Alert label -> dashboard variable; the cluster label maps to `cluster`."""


def _dashboard_url(settings: Settings, labels: tuple[str, ...]) -> str:
    links = settings.links
    url = f"{links.grafana}{DASHBOARD_PATH}{links.dashboard_uid}/{links.dashboard_slug}"
    query = "&".join(
        f"var-{_DASHBOARD_VARIABLE.get(label, 'cluster')}={{{{ $labels.{label} | urlquery }}}}"
        for label in labels
    )
    return f"{url}?{query}" if query else url


def _num(value: float) -> str:
    """0.5 -> '0.5', 10.0 -> '10': thresholds read the way they are written in the config."""
    return f"{value:g}"


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


def _quoted(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

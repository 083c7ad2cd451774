"""The "vLLM / Speculative decoding" Grafana dashboard, as a plain dict.

Every query is scoped by the cluster (where configured), namespace, pod and model variables.
Queries read the raw series with `$__rate_interval`, so the dashboard works before the recording
rules are loaded, except the fleet row, which ranks the recording rules. Every division is
`num / (den > 0)` and every quantile is kept only where observations were counted; where the
series exist but nothing was counted, the query falls back to NaN, which reads "No traffic", while
no series at all reads "No data": idle never looks like down. No query names a job: the sidecar's
and vLLM's jobs are variables.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec_artifacts.grafana import (
    JSON,
    SCHEMA_VERSION,
    Panel,
    Query,
    Row,
    Threshold,
    annotation,
    constant_variable,
    datasource_variable,
    layout,
    query_variable,
    value_mapping,
)
from specdec_artifacts.promql import guarded_ratio, selector, sum_by
from specdec_artifacts.rules import ALERT_PREFIX, Names, threshold_expr
from specdec_artifacts.settings import Settings
from specdec_exporter.core.verdict import (
    ACCEPTANCE_THRESHOLD,
    HEALTHY_ABOVE,
    NET_LOSS_BELOW,
    Verdict,
)

TITLE = "vLLM / Speculative decoding"
TAGS = ["vllm", "speculative-decoding"]
WINDOW = "$__rate_interval"
TOKENS_PER_SECOND = "suffix: tok/s"
REFERENCE_LINES = "(threshold|break-even|k \\+ 1).*"
"""Series drawn dashed: the per-model threshold t, the break-even acceptance, the k + 1 ceiling."""
VLLM_JOB = "vllm_job"
"""The variable naming the job of vLLM's own series (the latency panels)."""
SIDECAR_JOB = "sidecar_job"
"""The variable naming the job of the sidecar's series (every other panel)."""
SPLIT = "engine probe or request tap"
"""How a title names the temperature split's source: the probe feeds it where vLLM has it, else
the tap (specdec_temperature_split_info says which)."""


@dataclass(frozen=True)
class Scope:
    """Label matchers for each kind of series, from the config and the dashboard variables."""

    cluster: str
    """`<cluster label>=~"$cluster"`, or empty when no cluster label is configured."""
    models: str
    """Per-model recording rules: summed over pods, so without the job and target labels."""
    fleet: str
    sidecar: str
    model: str
    engine: str
    bucket: str
    vllm: str

    @classmethod
    def of(cls, settings: Settings) -> Scope:
        label = settings.selectors.cluster_label
        cluster = f'{label}=~"$cluster"' if label else ""
        models = _join(cluster, 'namespace=~"$namespace"')
        fleet = _join(f'job=~"${SIDECAR_JOB}"', models)
        sidecar = _join(fleet, 'pod=~"$pod"')
        model = _join(sidecar, 'model_name=~"$model"')
        vllm = _join(
            f'job=~"${VLLM_JOB}"',
            cluster,
            'namespace=~"$namespace"',
            'pod=~"$pod"',
            'model_name=~"$model"',
            'engine=~"$engine"',
        )
        return cls(
            cluster,
            models,
            fleet,
            sidecar,
            model,
            _join(model, 'engine=~"$engine"'),
            _join(model, 'temperature_bucket=~"$bucket"'),
            vllm,
        )


def _join(*matchers: str) -> str:
    return ", ".join(m for m in matchers if m)


def _rate(metric: str, matchers: str) -> str:
    return f"rate({selector(metric, matchers)}[{WINDOW}])"


def _sum_rate(by: str, metric: str, matchers: str) -> str:
    return sum_by(by, _rate(metric, matchers)) if by else f"sum({_rate(metric, matchers)})"


def _idle(counted: str) -> str:
    """NaN where the series of `counted` exist but counted nothing: "No traffic", not "No data"."""
    return f"\nor\n{counted} * NaN"


def _ratio(
    by: str, numerator: str, denominator: str, matchers: str, numerator_matchers: str = ""
) -> str:
    """num / (den > 0), else NaN where den's series exist (idle), else nothing (no data)."""
    den = _sum_rate(by, denominator, matchers)
    num = _sum_rate(by, numerator, numerator_matchers or matchers)
    return guarded_ratio(num, den) + _idle(den)


def _quantile(q: float, histogram: str, by: str, matchers: str) -> str:
    """P(q) of a histogram, only where the window holds observations (NaN where none)."""
    buckets = _sum_rate(f"{by}, le" if by else "le", f"{histogram}_bucket", matchers)
    count = _sum_rate(by, f"{histogram}_count", matchers)
    return f"histogram_quantile({q}, {buckets})\nand\n{count} > 0" + _idle(count)


def variables(settings: Settings) -> list[JSON]:
    scope, label = Scope.of(settings), settings.selectors.cluster_label
    in_cluster = _join(f'job=~"${SIDECAR_JOB}"', scope.cluster)
    in_namespace = _join(in_cluster, 'namespace=~"$namespace"')
    in_pod = _join(in_namespace, 'pod=~"$pod"')
    vllm_pods = _join(scope.cluster, 'namespace=~"$namespace"', 'pod=~"$pod"')
    cluster = (
        query_variable("cluster", "Cluster", f"label_values(specdec_build_info, {label})")
        if label
        else constant_variable("cluster", "")
    )
    return [
        datasource_variable(),
        cluster,
        query_variable(
            SIDECAR_JOB,
            "Sidecar job",
            f"label_values({selector('specdec_build_info', scope.cluster)}, job)",
            current=settings.selectors.sidecar_job,
        ),
        query_variable(
            "namespace", "Namespace", f"label_values(specdec_build_info{{{in_cluster}}}, namespace)"
        ),
        query_variable("pod", "Pod", f"label_values(specdec_build_info{{{in_namespace}}}, pod)"),
        query_variable(
            "model", "Model", f"label_values(specdec_spec_decode_enabled{{{in_pod}}}, model_name)"
        ),
        query_variable(
            "engine",
            "Engine",
            f'label_values(specdec_drafts_total{{{in_pod}, model_name=~"$model"}}, engine)',
        ),
        query_variable(
            "bucket",
            "Temperature bucket",
            f'label_values(specdec_requests_total{{{in_pod}, model_name=~"$model"}}, '
            "temperature_bucket)",
        ),
        query_variable(
            VLLM_JOB,
            "vLLM job",
            f"label_values(vllm:e2e_request_latency_seconds_count{{{vllm_pods}}}, job)",
            current=settings.selectors.vllm_job,
        ),
    ]


def _threshold(settings: Settings, scope: Scope) -> Query:
    """t per model, as the alerts compare it: by model, by method, else the default."""
    return Query(
        f"max by (model_name) (\n{threshold_expr(settings, scope.model)}\n)",
        "threshold {{model_name}}",
    )


def _acceptance_panel(
    title: str,
    description: str,
    series: Query,
    settings: Settings,
    scope: Scope,
    *extra: Query,
) -> Panel:
    """An acceptance-rate panel (0..1) with the dashed threshold t (and ``extra`` lines)."""
    return Panel(
        title,
        description,
        (series, _threshold(settings, scope), *extra),
        unit="percentunit",
        min=0,
        max=1,
        dashed=REFERENCE_LINES,
    )


VERDICTS = {
    0: (Verdict.DISABLE, "red"),
    1: (Verdict.BELOW_THRESHOLD, "orange"),
    2: (Verdict.BORDERLINE, "yellow"),
    3: (Verdict.HEALTHY, "green"),
}
"""The verdict stat's values, worst first: the rows of core/verdict.py's table."""


def _per_target(settings: Settings) -> str:
    """The labels naming one scrape target: a join of two of the sidecar's series on these
    stays within one sidecar."""
    return ", ".join(("job", "instance", *settings.cluster))


def verdict_expr(settings: Settings, scope: Scope) -> str:
    """The verdict per model as a number (VERDICTS), from a, t and s as the alerts compare
    them: s < 1 first, then a < t, then the borderline band, else healthy; only where drafts
    were counted, NaN ("No traffic") where the model drafted nothing."""
    drafted = _sum_rate("model_name", "specdec_draft_tokens_total", scope.engine)
    accepted = _sum_rate("model_name", "specdec_accepted_tokens_total", scope.engine)
    acceptance = f"(\n{guarded_ratio(accepted, drafted)}\n)"
    threshold = f"max by (model_name) (\n{threshold_expr(settings, scope.model)}\n)"
    speedup = f"min by (model_name) ({selector('specdec_estimated_speedup', scope.model)})"
    codes = {verdict: code for code, (verdict, _) in VERDICTS.items()}
    return (
        f"(\n{codes[Verdict.DISABLE]} * ({speedup} < {NET_LOSS_BELOW:g})\nor\n"
        f"{codes[Verdict.BELOW_THRESHOLD]} + 0 * ({acceptance}\n< {threshold})\nor\n"
        f"{codes[Verdict.BORDERLINE]} + 0 * ({acceptance} <= {HEALTHY_ABOVE:g})\nor\n"
        f"{codes[Verdict.HEALTHY]} + 0 * {acceptance}\n)\nand\n{acceptance}" + _idle(drafted)
    )


HEALTH = {
    0: ("DOWN", "red"),
    1: ("up", "green"),
    2: ("engine probe", "green"),
    3: ("request tap", "green"),
    4: ("none", "orange"),
    5: ("a split off", "orange"),
    6: ("both splits on", "green"),
    7: ("not in vLLM", "blue"),
}
"""The health stat's values as words: targets up or down, the split's source, the probe's state."""
NO_SIDECAR = "No data: no sidecar scraped"


def health_panel(settings: Settings, scope: Scope) -> Panel:
    """The first thing to read: is the sidecar scraped, does vLLM answer it, where the temperature
    split comes from, and whether the engine probe has both splits on (worst pod of each)."""
    target = _per_target(settings)
    split_info = "specdec_temperature_split_info"
    source = "\nor\n".join(
        f"{code} * {selector(split_info, scope.sidecar, matcher)}"
        for code, matcher in ((2, 'source="probe"'), (3, 'source="tap"'), (4, 'source="none"'))
    )
    probe = "specdec_engine_probe_info"
    both_on = 'temperature_split="on", batch_split="on"'
    probe_state = (
        f"6 * {selector(probe, scope.sidecar, both_on)}\nor\n5 * {selector(probe, scope.sidecar)}"
        f"\nor on ({target})\n7 * group by ({target}) "
        f"({selector('specdec_build_info', scope.sidecar)})"
    )
    return Panel(
        "Health",
        "The worst pod of each: the sidecar's target as Prometheus scrapes it (DOWN: the sidecar "
        "is not answering Prometheus); vLLM as the sidecar polls it (specdec_up); where the "
        "temperature split comes from (engine probe, request tap, none); the engine probe inside "
        "vLLM (a split off: specdec_engine_probe_info says why; not in vLLM: no probe). "
        f'"{NO_SIDECAR}" means Prometheus has no sidecar series at all, which is not "No '
        'traffic".',
        (
            Query(f"min({selector('up', scope.sidecar)})", "sidecar target"),
            Query(f"min({selector('specdec_up', scope.sidecar)})", "vLLM"),
            Query(f"max(\n{source}\n)", "temperature split"),
            Query(f"min(\n{probe_state}\n)", "engine probe"),
        ),
        kind="stat",
        width=6,
        height=5,
        mappings=(value_mapping(HEALTH),),
        no_value=NO_SIDECAR,
    )


def now_row(settings: Settings, scope: Scope) -> Row:
    """What an on-call engineer reads first: health, then acceptance, speedup, verdict and the
    split's coverage, now (instant values: a stat never shows a figure from before traffic
    stopped)."""
    target = _per_target(settings)
    speedup = (
        f"min by (model_name, source) (\n{selector('specdec_estimated_speedup', scope.model)}\n"
        f"* on ({target}) group_left (source)\n"
        f"group by ({target}, source) ({selector('specdec_draft_cost_ratio', scope.sidecar)})\n)"
        + _idle(_sum_rate("model_name", "specdec_draft_tokens_total", scope.engine))
    )  # the speedup gauge is absent without drafts in the sidecar's window: idle, not down
    coverage = selector("specdec_request_coverage_ratio", scope.model)
    split_info = selector("specdec_temperature_split_info", scope.sidecar)
    coverage_by_source = (
        f"min by (model_name, source) (\n{coverage}\n* on ({target}) group_left (source)\n"
        f"group by ({target}, source) ({split_info})\n)\nor on (model_name)\n"
        f"min by (model_name) ({coverage})"
        + _idle(_sum_rate("model_name", "specdec_draft_tokens_total", scope.engine))
    )
    return Row(
        "Now: health, acceptance, speedup, verdict, split coverage",
        (
            health_panel(settings, scope),
            Panel(
                "Acceptance now",
                "Accepted / proposed draft tokens per model over the selected engines and pods: "
                f"red below the default t = {ACCEPTANCE_THRESHOLD:g}, yellow in the borderline "
                f"band up to {HEALTHY_ABOVE:g}, green above (a model's own t is in the verdict "
                "and the acceptance row).",
                (
                    Query(
                        _ratio(
                            "model_name",
                            "specdec_accepted_tokens_total",
                            "specdec_draft_tokens_total",
                            scope.engine,
                        ),
                        "{{model_name}}",
                    ),
                ),
                kind="stat",
                width=5,
                height=5,
                unit="percentunit",
                threshold=Threshold(ACCEPTANCE_THRESHOLD, band=HEALTHY_ABOVE),
            ),
            Panel(
                "Speedup (c calibrated, else assumed)",
                "The sidecar's modelled speedup L / (1 + k·c), the worst pod per model, with "
                "where c came from: `calibration` (measured by `specdec-exporter calibrate`), "
                "`flag`, `method` (that method's default) or `default`. Below 1: a net loss.",
                (Query(speedup, "{{model_name}} (c: {{source}})"),),
                kind="stat",
                width=5,
                height=5,
                threshold=Threshold(NET_LOSS_BELOW),
            ),
            Panel(
                "Verdict",
                "check's decision table per model, over the last rate interval: "
                f"{Verdict.DISABLE} (modelled speedup < 1), {Verdict.BELOW_THRESHOLD} "
                f"(acceptance < the model's t), {Verdict.BORDERLINE} (up to "
                f"{HEALTHY_ABOVE:g}), {Verdict.HEALTHY}; No traffic once nothing is drafted, "
                "never the last verdict before traffic stopped. The runbook explains each "
                "(dashboard link).",
                (Query(verdict_expr(settings, scope), "{{model_name}}"),),
                kind="stat",
                width=4,
                height=5,
                mappings=(
                    value_mapping(
                        {code: (str(verdict), color) for code, (verdict, color) in VERDICTS.items()}
                    ),
                ),
            ),
            Panel(
                f"Split coverage ({SPLIT})",
                "Draft tokens attributed to a temperature bucket / draft tokens vLLM counted, "
                "the lowest pod per model, with the split's source (`probe` or `tap`). It can "
                "exceed 1 for a while: a sequence's draft tokens are attributed when it finishes, "
                "vLLM counts them as they are drafted, so long sequences that began before the "
                "window and finish in it add more than vLLM counted in it.",
                (Query(coverage_by_source, "{{model_name}} {{source}}"),),
                kind="stat",
                width=4,
                height=5,
                unit="percentunit",
                min=0,
                threshold=Threshold(settings.thresholds.coverage_ratio),
            ),
        ),
    )


def load_row(settings: Settings, scope: Scope) -> Row:
    """Acceptance by running-batch bucket: the engine probe's per-step split (load level)."""
    steps = "specdec_batch_steps_total"
    share = guarded_ratio(
        _sum_rate("batch_bucket", steps, scope.engine),
        _sum_rate("", steps, scope.engine),
        "ignoring (batch_bucket) group_left ()",
    ) + _idle(_sum_rate("batch_bucket", steps, scope.engine))
    return Row(
        "By load level: running-batch bucket (engine probe)",
        (
            _acceptance_panel(
                "Acceptance rate by running-batch bucket",
                "Accepted / proposed draft tokens per bucket of the engine step's running batch "
                "(requests scheduled together), from the engine probe. Dashed: the model's "
                "threshold t.",
                Query(
                    _ratio(
                        "model_name, batch_bucket",
                        "specdec_batch_accepted_tokens_total",
                        "specdec_batch_draft_tokens_total",
                        scope.engine,
                    ),
                    "{{model_name}} batch {{batch_bucket}}",
                ),
                settings,
                scope,
            ),
            Panel(
                "Mean acceptance length by running-batch bucket",
                "Tokens per verify step per bucket: 1 + accepted / drafts; dashed: k + 1.",
                (
                    Query(
                        "1 + "
                        + _ratio(
                            "model_name, batch_bucket",
                            "specdec_batch_accepted_tokens_total",
                            "specdec_batch_drafts_total",
                            scope.engine,
                        ),
                        "{{model_name}} batch {{batch_bucket}}",
                    ),
                    Query(
                        "1 + max by (model_name) ("
                        + selector("specdec_num_speculative_tokens", scope.model)
                        + ")",
                        "k + 1 {{model_name}}",
                    ),
                ),
                width=6,
                min=1,
                dashed=REFERENCE_LINES,
            ),
            Panel(
                "Engine steps per running-batch bucket",
                "Share of the engine's steps in each bucket: where the load sits.",
                (Query(share, "batch {{batch_bucket}}"),),
                width=6,
                unit="percentunit",
                min=0,
                max=1,
                stacked=True,
            ),
        ),
    )


def alert_annotations(settings: Settings, scope: Scope) -> list[JSON]:
    """The project's alerts while they fire: pages red, tickets orange."""
    matchers = (
        _join(f'alertname=~"{ALERT_PREFIX}.*"', 'alertstate="firing"', scope.cluster)
        + ', namespace=~"$namespace"'
    )
    return [
        annotation(
            name,
            f'ALERTS{{{matchers}, severity="{severity}"}}',
            color=color,
            title="{{alertname}}",
            text="{{model_name}} {{namespace}}/{{pod}} {{temperature_bucket}}",
            tags="severity,model_name,namespace",
        )
        for name, severity, color in (
            ("Pages (critical SpecDecode alerts)", "critical", "red"),
            ("Tickets (warning SpecDecode alerts)", "warning", "orange"),
        )
    ]


def acceptance_row(settings: Settings, scope: Scope) -> Row:
    per_model = _ratio(
        "model_name", "specdec_accepted_tokens_total", "specdec_draft_tokens_total", scope.engine
    )
    break_even = (
        f"max by (model_name) ({selector('specdec_break_even_acceptance_rate', scope.model)})"
    )
    return Row(
        "Acceptance",
        (
            _acceptance_panel(
                "Acceptance rate per model",
                "Accepted / proposed draft tokens, engines summed before dividing. Dashed: the "
                "model's alert threshold t, and the break-even: the acceptance rate at which the "
                "modelled speedup L / (1 + k·c) is 1 (k·c / mean draft length; c when every draft "
                "is k tokens long). Below the break-even, speculation is a net loss by the model.",
                Query(per_model, "{{model_name}}"),
                settings,
                scope,
                Query(break_even, "break-even {{model_name}}"),
            ),
            _acceptance_panel(
                "Acceptance rate per engine",
                "Per data-parallel engine: one engine far from the others points at that rank.",
                Query(
                    _ratio(
                        "model_name, engine",
                        "specdec_accepted_tokens_total",
                        "specdec_draft_tokens_total",
                        scope.engine,
                    ),
                    "{{model_name}} engine {{engine}}",
                ),
                settings,
                scope,
            ),
            Panel(
                "Mean acceptance length",
                "Tokens per verify step: 1 + accepted / drafts (counts the bonus token); the "
                "dashed line is the ceiling k + 1.",
                (
                    Query(
                        "1 + "
                        + _ratio(
                            "model_name",
                            "specdec_accepted_tokens_total",
                            "specdec_drafts_total",
                            scope.engine,
                        ),
                        "{{model_name}}",
                    ),
                    Query(
                        "1 + max by (model_name) ("
                        + selector("specdec_num_speculative_tokens", scope.model)
                        + ")",
                        "k + 1 {{model_name}}",
                    ),
                ),
                width=8,
                min=1,
                dashed=REFERENCE_LINES,
            ),
            Panel(
                "Acceptance rate per draft position",
                "Accepted at position i / drafts. Unconditional: with variable draft lengths "
                "(ngram) a later position also counts drafts that never reached it.",
                (
                    Query(
                        guarded_ratio(
                            _sum_rate(
                                "model_name, position",
                                "specdec_accepted_tokens_per_position_total",
                                scope.engine,
                            ),
                            _sum_rate("model_name", "specdec_drafts_total", scope.engine),
                            "ignoring (position) group_left ()",
                        )
                        + _idle(
                            _sum_rate(
                                "model_name, position",
                                "specdec_accepted_tokens_per_position_total",
                                scope.engine,
                            )
                        ),
                        "{{model_name}} position {{position}}",
                    ),
                ),
                width=8,
                unit="percentunit",
                min=0,
                max=1,
            ),
            Panel(
                "Share of output from drafts",
                "Accepted draft tokens / all generated tokens: how much of the output the drafter "
                "wrote.",
                (
                    Query(
                        _ratio(
                            "model_name",
                            "specdec_accepted_tokens_total",
                            "specdec_generation_tokens_total",
                            scope.engine,
                        ),
                        "{{model_name}}",
                    ),
                ),
                width=8,
                unit="percentunit",
                min=0,
                max=1,
            ),
        ),
    )


def temperature_row(settings: Settings, scope: Scope) -> Row:
    histogram = "specdec_request_acceptance_rate"
    quantiles = tuple(
        Query(
            _quantile(q, histogram, "model_name, temperature_bucket", scope.bucket),
            f"P{round(q * 100)} {{{{temperature_bucket}}}}",
        )
        for q in (0.1, 0.5, 0.9)
    )
    heatmap = sum_by("le", f"increase({selector(f'{histogram}_bucket', scope.bucket)}[{WINDOW}])")
    share = guarded_ratio(
        _sum_rate("temperature_bucket", "specdec_requests_total", scope.model),
        _sum_rate("", "specdec_requests_total", scope.model),
        "ignoring (temperature_bucket) group_left ()",
    ) + _idle(_sum_rate("temperature_bucket", "specdec_requests_total", scope.model))
    tail = Threshold(settings.thresholds.tail_acceptance_rate)
    return Row(
        f"By temperature bucket ({SPLIT})",
        (
            _acceptance_panel(
                "Acceptance rate by temperature bucket",
                "From the temperature split's counters: the engine probe's per finished "
                "sequence where vLLM has it, else the request tap's per request "
                "(specdec_temperature_split_info says which). Acceptance falls as temperature "
                "rises. Dashed: the model's threshold t.",
                Query(
                    _ratio(
                        "model_name, temperature_bucket",
                        "specdec_request_accepted_tokens_total",
                        "specdec_request_draft_tokens_total",
                        scope.bucket,
                    ),
                    "{{model_name}} {{temperature_bucket}}",
                ),
                settings,
                scope,
            ),
            Panel(
                "Per-request acceptance (heatmap)",
                "How many requests (finished sequences, from the engine probe) ended with each "
                "acceptance rate, over time.",
                (Query(heatmap, heatmap=True),),
                kind="heatmap",
                unit="percentunit",
            ),
            Panel(
                "Per-request acceptance P10 / P50 / P90",
                "A low P10 with a healthy mean is a tail of requests that accept few drafts; the "
                "line is the tail alert's threshold.",
                quantiles,
                unit="percentunit",
                min=0,
                max=1,
                threshold=tail,
            ),
            Panel(
                "Traffic share per temperature bucket",
                "Requests per bucket / all requests the split saw (finished sequences from the "
                "engine probe, requests through the request tap).",
                (Query(share, "{{temperature_bucket}}"),),
                unit="percentunit",
                min=0,
                max=1,
                stacked=True,
            ),
        ),
    )


def speedup_row(scope: Scope) -> Row:
    flow = [
        Query(_sum_rate("", "specdec_draft_tokens_total", scope.engine), "drafted"),
        Query(_sum_rate("", "specdec_accepted_tokens_total", scope.engine), "accepted"),
        Query(
            f"{_sum_rate('', 'specdec_draft_tokens_total', scope.engine)}\n- "
            f"{_sum_rate('', 'specdec_accepted_tokens_total', scope.engine)}",
            "rejected",
        ),
        Query(_sum_rate("", "specdec_generation_tokens_total", scope.engine), "generated"),
    ]
    return Row(
        "Speedup and token flow",
        (
            Panel(
                "Modelled speedup",
                "The sidecar's model L / (1 + k·c) over its window: below 1, drafting costs more "
                "than it saves (a net loss, the SpecDecodeSpeedupBelowOne page).",
                (
                    Query(
                        selector("specdec_estimated_speedup", scope.model)
                        + _idle(selector("specdec_spec_decode_enabled", scope.model)),
                        "{{model_name}} {{pod}}",
                    ),
                ),
                width=10,
                threshold=Threshold(NET_LOSS_BELOW),
            ),
            Panel(
                "Draft cost c",
                "The c of the model and where it came from: flag, calibration, method (that "
                "method's default) or default. A measured c (calibration) beats an assumed one.",
                (Query(selector("specdec_draft_cost_ratio", scope.sidecar), "{{pod}} {{source}}"),),
                kind="stat",
                width=4,
            ),
            Panel(
                "Draft token flow",
                "Drafted = accepted + rejected; generated includes every output token.",
                tuple(flow),
                width=10,
                unit=TOKENS_PER_SECOND,
            ),
        ),
    )


def latency_row(scope: Scope) -> Row:
    by = "temperature_bucket"
    split_ttft = _quantile(0.9, "specdec_request_time_to_first_token_seconds", by, scope.bucket)
    split_tpot = _quantile(0.9, "specdec_request_time_per_output_token_seconds", by, scope.bucket)
    vllm_ttft = _quantile(0.9, "vllm:time_to_first_token_seconds", "", scope.vllm)
    vllm_tpot = _quantile(0.9, "vllm:request_time_per_output_token_seconds", "", scope.vllm)
    vllm_itl = _quantile(0.9, "vllm:inter_token_latency_seconds", "", scope.vllm)
    vllm_e2e = tuple(
        Query(
            _quantile(q, "vllm:e2e_request_latency_seconds", "", scope.vllm), f"P{round(q * 100)}"
        )
        for q in (0.5, 0.9, 0.99)
    )
    return Row(
        "Latency by temperature bucket",
        (
            Panel(
                "Time to first token P90",
                "Per temperature bucket from the split (engine probe: as vLLM measures it; request "
                "tap: as the client sees it), next to vLLM's own histogram (dashed, all requests "
                "of the selected pods).",
                (Query(split_ttft, "bucket {{temperature_bucket}}"), Query(vllm_ttft, "vLLM all")),
                width=8,
                unit="s",
                dashed="vLLM.*",
            ),
            Panel(
                "Time per output token P90",
                "Per temperature bucket from the split (engine probe or request tap); dashed: "
                "vLLM's per-request TPOT and inter-token latency.",
                (
                    Query(split_tpot, "bucket {{temperature_bucket}}"),
                    Query(vllm_tpot, "vLLM TPOT"),
                    Query(vllm_itl, "vLLM inter-token"),
                ),
                width=8,
                unit="s",
                dashed="vLLM.*",
            ),
            Panel(
                "vLLM end-to-end request latency",
                "vLLM's own histogram for the selected pods: speculation trades TTFT for TPOT.",
                vllm_e2e,
                width=8,
                unit="s",
            ),
        ),
    )


def health_row(settings: Settings, scope: Scope) -> Row:
    attributed = _ratio(
        "model_name",
        "specdec_requests_total",
        "specdec_requests_total",
        scope.model,
        numerator_matchers=f'{scope.model}, attributed="true"',
    )
    return Row(
        "Split coverage and sidecar health",
        (
            Panel(
                f"Split coverage ({SPLIT})",
                "Draft tokens the temperature split attributed to a bucket / draft tokens vLLM "
                "counted, per pod; and the share of requests attributed. Coverage can exceed 1 "
                "for a while: a sequence's draft tokens are attributed when it finishes, while "
                "vLLM counts them as they are drafted.",
                (
                    Query(
                        selector("specdec_request_coverage_ratio", scope.model),
                        "{{model_name}} {{pod}}",
                    ),
                    Query(attributed, "attributed requests {{model_name}}"),
                ),
                width=8,
                unit="percentunit",
                min=0,
                max=1,
                threshold=Threshold(settings.thresholds.coverage_ratio),
            ),
            Panel(
                "Sidecar target up",
                "Prometheus' scrape of the sidecar (1 = up).",
                (Query(selector("up", scope.sidecar), "{{pod}} {{instance}}"),),
                kind="stat",
                width=4,
                threshold=Threshold(1),
            ),
            Panel(
                "vLLM reachable from the sidecar",
                "specdec_up: the sidecar's last poll of vLLM (1 = up).",
                (Query(selector("specdec_up", scope.sidecar), "{{pod}}"),),
                kind="stat",
                width=4,
                threshold=Threshold(1),
            ),
            Panel(
                "vLLM up since the sidecar started",
                "specdec_vllm_ever_up: 0 while vLLM has not answered once (still starting, paged "
                "only after the startup grace); 1 once it has (a failure then is an outage).",
                (Query(selector("specdec_vllm_ever_up", scope.sidecar), "{{pod}}"),),
                kind="stat",
                width=4,
                threshold=Threshold(1),
            ),
            Panel(
                "Sidecar build",
                "Versions running (number of sidecars per version).",
                (
                    Query(
                        sum_by("version", selector("specdec_build_info", scope.sidecar)),
                        "{{version}}",
                    ),
                ),
                kind="stat",
                width=4,
            ),
            Panel(
                "Scrape duration of vLLM",
                "How long the sidecar's poll of vLLM's /metrics took.",
                (Query(selector("specdec_scrape_duration_seconds", scope.sidecar), "{{pod}}"),),
                unit="s",
            ),
            Panel(
                "Failed polls of vLLM per minute, by reason",
                "The sidecar's failed polls of vLLM's /metrics: connect, timeout, http_status, "
                "parse, too_large, internal (a bug of the sidecar's: its log says where) "
                "(per minute; one poll every --interval seconds).",
                (
                    Query(
                        "60 * "
                        + _sum_rate(
                            "pod, instance, reason", "specdec_scrape_failures_total", scope.sidecar
                        ),
                        "{{pod}} {{instance}} {{reason}}",
                    ),
                ),
                unit="suffix: /min",
            ),
        ),
    )


def fleet_row(settings: Settings, scope: Scope) -> Row:
    """Models and pods ranked worst first, from the recording rules (what Thanos or Mimir
    evaluate across clusters)."""
    names = Names.of(settings)
    ratio_op = f"ratio_{names.window}"
    acceptance = Threshold(settings.thresholds.acceptance_rate)
    speedup = Threshold(NET_LOSS_BELOW)
    return Row(
        "Fleet: models and pods ranked, worst first (recording rules)",
        (
            Panel(
                "Models by acceptance",
                f"Accepted / draft tokens per model over all its pods ({settings.windows.rate}).",
                (
                    Query(
                        f"sort({selector(names.model('acceptance_rate', ratio_op), scope.models)})",
                        instant=True,
                    ),
                ),
                kind="table",
                width=6,
                unit="percentunit",
                threshold=acceptance,
            ),
            Panel(
                "Models by modelled speedup",
                "The worst pod's modelled speedup per model: below 1, a net loss by the model.",
                (
                    Query(
                        f"sort({selector(names.model('estimated_speedup', 'min'), scope.models)})",
                        instant=True,
                    ),
                ),
                kind="table",
                width=6,
                threshold=speedup,
            ),
            Panel(
                "Pods by acceptance",
                f"Accepted / draft tokens per pod and model ({settings.windows.rate}).",
                (
                    Query(
                        f"sort({selector(names.pod('acceptance_rate', ratio_op), scope.fleet)})",
                        instant=True,
                    ),
                ),
                kind="table",
                width=6,
                unit="percentunit",
                threshold=acceptance,
            ),
            Panel(
                "Pods by modelled speedup",
                "Each sidecar's modelled speedup L / (1 + k·c) over its window.",
                (
                    Query(
                        f"sort({selector('specdec_estimated_speedup', scope.fleet)})", instant=True
                    ),
                ),
                kind="table",
                width=6,
                threshold=speedup,
            ),
        ),
    )


def dashboard(settings: Settings) -> JSON:
    links, scope = settings.links, Scope.of(settings)
    rows = (
        now_row(settings, scope),
        acceptance_row(settings, scope),
        temperature_row(settings, scope),
        load_row(settings, scope),
        speedup_row(scope),
        latency_row(scope),
        health_row(settings, scope),
        fleet_row(settings, scope),
    )
    return {
        "uid": links.dashboard_uid,
        "title": TITLE,
        "description": "Acceptance, temperature split, modelled speedup and health of "
        "speculative decoding in vLLM (vllm-specdec-exporter).",
        "tags": TAGS,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "schemaVersion": SCHEMA_VERSION,
        "links": [
            {
                "title": "Runbook",
                "type": "link",
                "url": links.runbook,
                "targetBlank": True,
                "icon": "doc",
            }
        ],
        "templating": {"list": variables(settings)},
        "annotations": {"list": alert_annotations(settings, scope)},
        "panels": layout(rows),
    }

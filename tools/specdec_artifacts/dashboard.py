"""The "vLLM / Speculative decoding" Grafana dashboard, as a plain dict.

Queries read the raw series with `$__rate_interval`, so the dashboard works before the recording
rules are loaded; every division is `num / (den > 0)` and every quantile is kept only where
observations were counted, so idle periods show "No traffic" instead of NaN or 0.
"""

from __future__ import annotations

from specdec_artifacts.grafana import (
    JSON,
    SCHEMA_VERSION,
    Panel,
    Query,
    Row,
    Threshold,
    datasource_variable,
    layout,
    query_variable,
)
from specdec_artifacts.promql import guarded_ratio, selector, sum_by
from specdec_artifacts.settings import Settings

TITLE = "vLLM / Speculative decoding"
TAGS = ["vllm", "speculative-decoding"]
WINDOW = "$__rate_interval"

SIDECAR = 'job=~"$job", instance=~"$instance"'
MODEL = f'{SIDECAR}, model_name=~"$model"'
ENGINE = f'{MODEL}, engine=~"$engine"'
BUCKET = f'{MODEL}, temperature_bucket=~"$bucket"'
VLLM = 'model_name=~"$model", engine=~"$engine"'
"""vLLM's own series come from another target (port 8000): no job or instance filter."""

TOKENS_PER_SECOND = "suffix: tok/s"


def _rate(metric: str, matchers: str) -> str:
    return f"rate({selector(metric, matchers)}[{WINDOW}])"


def _sum_rate(by: str, metric: str, matchers: str) -> str:
    return sum_by(by, _rate(metric, matchers)) if by else f"sum({_rate(metric, matchers)})"


def _ratio(by: str, numerator: str, denominator: str, matchers: str) -> str:
    return guarded_ratio(_sum_rate(by, numerator, matchers), _sum_rate(by, denominator, matchers))


def _quantile(q: float, histogram: str, by: str, matchers: str) -> str:
    """P(q) of a histogram, only where the window holds observations."""
    buckets = _sum_rate(f"{by}, le" if by else "le", f"{histogram}_bucket", matchers)
    return (f"histogram_quantile({q}, {buckets})\n"
            f"and\n{_sum_rate(by, f'{histogram}_count', matchers)} > 0")


def variables() -> list[JSON]:
    return [
        datasource_variable(),
        # All = the listed values, not `.*`: `up{job=~"$job"}` must not match vLLM's own job.
        query_variable("job", "Job", "label_values(specdec_build_info, job)", all_value=None),
        query_variable("model", "Model",
                       'label_values(specdec_spec_decode_enabled{job=~"$job"}, model_name)'),
        query_variable("instance", "Instance",
                       'label_values(specdec_build_info{job=~"$job"}, instance)', all_value=None),
        query_variable("engine", "Engine",
                       'label_values(specdec_drafts_total{job=~"$job", model_name=~"$model"}, '
                       "engine)"),
        query_variable("bucket", "Temperature bucket",
                       'label_values(specdec_requests_total{job=~"$job", model_name=~"$model"}, '
                       "temperature_bucket)"),
    ]


def acceptance_row(settings: Settings) -> Row:
    line = Threshold(settings.thresholds.acceptance_rate)
    per_model = _ratio("model_name", "specdec_accepted_tokens_total",
                       "specdec_draft_tokens_total", ENGINE)
    break_even = f"max by (model_name) ({selector('specdec_break_even_acceptance_rate', MODEL)})"
    return Row("Acceptance", (
        Panel("Acceptance rate per model",
              "Accepted / proposed draft tokens, engines summed before dividing. Red line: the "
              "alert threshold; dashed: the acceptance at which the modelled speedup is 1.",
              (Query(per_model, "{{model_name}}"), Query(break_even, "break-even {{model_name}}")),
              unit="percentunit", min=0, max=1, threshold=line, dashed="break-even.*"),
        Panel("Acceptance rate per engine",
              "Per data-parallel engine: one engine far from the others points at that rank.",
              (Query(_ratio("model_name, engine", "specdec_accepted_tokens_total",
                            "specdec_draft_tokens_total", ENGINE), "{{model_name}} engine "
                     "{{engine}}"),),
              unit="percentunit", min=0, max=1, threshold=line),
        Panel("Mean acceptance length",
              "Tokens per verify step: 1 + accepted / drafts (counts the bonus token); the "
              "dashed line is the ceiling k + 1.",
              (Query("1 + " + _ratio("model_name", "specdec_accepted_tokens_total",
                                     "specdec_drafts_total", ENGINE), "{{model_name}}"),
               Query("1 + max by (model_name) ("
                     + selector("specdec_num_speculative_tokens", MODEL) + ")",
                     "k + 1 {{model_name}}")),
              width=8, min=1, dashed="k \\+ 1.*"),
        Panel("Acceptance rate per draft position",
              "Accepted at position i / drafts. Unconditional: with variable draft lengths "
              "(ngram) a later position also counts drafts that never reached it.",
              (Query(guarded_ratio(
                  _sum_rate("model_name, position", "specdec_accepted_tokens_per_position_total",
                            ENGINE),
                  _sum_rate("model_name", "specdec_drafts_total", ENGINE),
                  "ignoring (position) group_left ()"), "{{model_name}} position {{position}}"),),
              width=8, unit="percentunit", min=0, max=1),
        Panel("Share of output from drafts",
              "Accepted draft tokens / all generated tokens: how much of the output the drafter "
              "wrote.",
              (Query(_ratio("model_name", "specdec_accepted_tokens_total",
                            "specdec_generation_tokens_total", ENGINE), "{{model_name}}"),),
              width=8, unit="percentunit", min=0, max=1),
    ))


def temperature_row(settings: Settings) -> Row:
    line = Threshold(settings.thresholds.acceptance_rate)
    histogram = "specdec_request_acceptance_rate"
    quantiles = tuple(
        Query(_quantile(q, histogram, "model_name, temperature_bucket", BUCKET),
              f"P{round(q * 100)} {{{{temperature_bucket}}}}")
        for q in (0.1, 0.5, 0.9))
    heatmap = sum_by("le", f"increase({selector(f'{histogram}_bucket', BUCKET)}[{WINDOW}])")
    share = guarded_ratio(_sum_rate("temperature_bucket", "specdec_requests_total", MODEL),
                          _sum_rate("", "specdec_requests_total", MODEL),
                          "ignoring (temperature_bucket) group_left ()")
    return Row("By temperature bucket (request tap)", (
        Panel("Acceptance rate by temperature bucket",
              "From the tap's per-request counters. Acceptance falls as temperature rises.",
              (Query(_ratio("model_name, temperature_bucket",
                            "specdec_request_accepted_tokens_total",
                            "specdec_request_draft_tokens_total", BUCKET),
                     "{{model_name}} {{temperature_bucket}}"),),
              unit="percentunit", min=0, max=1, threshold=line),
        Panel("Per-request acceptance (heatmap)",
              "How many requests ended with each acceptance rate, over time.",
              (Query(heatmap, heatmap=True),), kind="heatmap", unit="percentunit"),
        Panel("Per-request acceptance P10 / P50 / P90",
              "A low P10 with a healthy mean is a tail of requests that speculation slows down.",
              quantiles, unit="percentunit", min=0, max=1, threshold=line),
        Panel("Traffic share per temperature bucket",
              "Requests per bucket / all requests through the tap.",
              (Query(share, "{{temperature_bucket}}"),),
              unit="percentunit", min=0, max=1, stacked=True),
    ))


def speedup_row(settings: Settings) -> Row:
    flow = [
        Query(_sum_rate("", "specdec_draft_tokens_total", ENGINE), "drafted"),
        Query(_sum_rate("", "specdec_accepted_tokens_total", ENGINE), "accepted"),
        Query(f"{_sum_rate('', 'specdec_draft_tokens_total', ENGINE)}\n- "
              f"{_sum_rate('', 'specdec_accepted_tokens_total', ENGINE)}", "rejected"),
        Query(_sum_rate("", "specdec_generation_tokens_total", ENGINE), "generated"),
    ]
    return Row("Speedup and token flow", (
        Panel("Modelled speedup",
              "The sidecar's model L / (1 + k·c) over its window: below 1, drafting costs more "
              "than it saves.",
              (Query(selector("specdec_estimated_speedup", MODEL), "{{model_name}} {{instance}}"),),
              threshold=Threshold(settings.thresholds.speedup)),
        Panel("Draft token flow",
              "Drafted = accepted + rejected; generated includes every output token.",
              tuple(flow), unit=TOKENS_PER_SECOND),
    ))


def latency_row() -> Row:
    by = "temperature_bucket"
    tap_ttft = _quantile(0.9, "specdec_request_time_to_first_token_seconds", by, BUCKET)
    tap_tpot = _quantile(0.9, "specdec_request_time_per_output_token_seconds", by, BUCKET)
    vllm_ttft = _quantile(0.9, "vllm:time_to_first_token_seconds", "", VLLM)
    vllm_tpot = _quantile(0.9, "vllm:request_time_per_output_token_seconds", "", VLLM)
    vllm_itl = _quantile(0.9, "vllm:inter_token_latency_seconds", "", VLLM)
    vllm_e2e = tuple(Query(_quantile(q, "vllm:e2e_request_latency_seconds", "", VLLM),
                           f"P{round(q * 100)}") for q in (0.5, 0.9, 0.99))
    return Row("Latency by temperature bucket", (
        Panel("Time to first token P90",
              "Per bucket from the tap, next to vLLM's own histogram (dashed, all requests).",
              (Query(tap_ttft, "tap {{temperature_bucket}}"), Query(vllm_ttft, "vLLM all")),
              width=8, unit="s", dashed="vLLM.*"),
        Panel("Time per output token P90",
              "Per bucket from the tap; dashed: vLLM's per-request TPOT and inter-token latency.",
              (Query(tap_tpot, "tap {{temperature_bucket}}"), Query(vllm_tpot, "vLLM TPOT"),
               Query(vllm_itl, "vLLM inter-token")),
              width=8, unit="s", dashed="vLLM.*"),
        Panel("vLLM end-to-end request latency",
              "vLLM's own histogram, for context: speculation trades TTFT for TPOT.",
              vllm_e2e, width=8, unit="s"),
    ))


def health_row(settings: Settings) -> Row:
    attributed = guarded_ratio(
        _sum_rate("model_name", "specdec_requests_total", f'{MODEL}, attributed="true"'),
        _sum_rate("model_name", "specdec_requests_total", MODEL))
    return Row("Tap coverage and sidecar health", (
        Panel("Tap coverage",
              "Draft tokens the tap attributed to a request / draft tokens vLLM counted.",
              (Query(selector("specdec_request_coverage_ratio", MODEL),
                     "{{model_name}} {{instance}}"),
               Query(attributed, "attributed requests {{model_name}}")),
              width=8, unit="percentunit", min=0, max=1,
              threshold=Threshold(settings.thresholds.coverage_ratio)),
        Panel("Sidecar target up", "Prometheus' scrape of the sidecar (1 = up).",
              (Query(selector("up", SIDECAR), "{{instance}}"),),
              kind="stat", width=4, threshold=Threshold(1)),
        Panel("vLLM reachable from the sidecar", "specdec_up: the sidecar's last poll of vLLM.",
              (Query(selector("specdec_up", SIDECAR), "{{instance}}"),),
              kind="stat", width=4, threshold=Threshold(1)),
        Panel("Sidecar build", "Versions running (number of sidecars per version).",
              (Query(sum_by("version", selector("specdec_build_info", SIDECAR)),
                     "{{version}}"),),
              kind="stat", width=8),
        Panel("Scrape duration of vLLM", "How long the sidecar's poll of vLLM's /metrics took.",
              (Query(selector("specdec_scrape_duration_seconds", SIDECAR), "{{instance}}"),),
              unit="s"),
        Panel("Scrape failures by reason", "connect, timeout, http_status, parse, too_large.",
              (Query(_sum_rate("instance, reason", "specdec_scrape_failures_total", SIDECAR),
                     "{{instance}} {{reason}}"),),
              unit="reqps"),
    ))


def dashboard(settings: Settings) -> JSON:
    links = settings.links
    rows = (acceptance_row(settings), temperature_row(settings), speedup_row(settings),
            latency_row(), health_row(settings))
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
        "links": [{"title": "Runbook", "type": "link", "url": links.runbook,
                   "targetBlank": True, "icon": "doc"}],
        "templating": {"list": variables()},
        "annotations": {"list": []},
        "panels": layout(rows),
    }

"""The `check` command: two scrapes a window apart, then a verdict per model and engine."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import httpx
from pydantic import Field

from specdec_exporter.commands.exits import EXIT_UNREACHABLE, UnreachableError, describe_http_error
from specdec_exporter.commands.flags import FlagsOnly, add_settings_flags, settings_from_args
from specdec_exporter.core.batch_report import CONCURRENCY_IS_NOT_BATCH_SIZE, batch_entries
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import SeriesKey, Snapshot
from specdec_exporter.core.probe_parse import ProbeInfo
from specdec_exporter.core.report import (
    ALL_ENGINES,
    Entry,
    build_report,
    overall_verdict,
    rows_to_show,
)
from specdec_exporter.core.speculative_method import SpeculativeChoice
from specdec_exporter.core.timeline import Timeline
from specdec_exporter.core.verdict import Verdict, explain, verdict
from specdec_exporter.options import HttpUrl, redact_url
from specdec_exporter.sidecar.config import VllmTarget
from specdec_exporter.sidecar.engine_config import probe_state_lines
from specdec_exporter.sidecar.scraper import ScrapeError, Scraper
from specdec_exporter.sidecar.split import SplitSource
from specdec_exporter.sidecar.split_report import (
    SPLIT_TITLES,
    batch_table,
    batch_window,
    probe_bucket_counts,
)
from specdec_exporter.sidecar.tap_counters import (
    NotASidecarError,
    TapReader,
    bucket_rows,
    bucket_table,
)
from specdec_exporter.term import render_table, run_event_loop


class CheckSettings(FlagsOnly):
    """check's own flags; the vLLM ones (VllmTarget) are shared with `run`, environment included."""

    window: float = Field(10.0, ge=0.1, le=86400, description="seconds between the two scrapes")
    sidecar_url: HttpUrl | None = Field(
        None,
        description="a sidecar running the request tap: adds acceptance per temperature "
        "bucket over the same window (not needed with the engine probe on vLLM)",
    )
    as_json: bool = Field(False, alias="json", description="print one JSON object")


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, VllmTarget)
    add_settings_flags(parser, CheckSettings)


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(VllmTarget, args)
    options = settings_from_args(CheckSettings, args)
    outcome: dict[str, Any] = {}
    run_event_loop(_measure(settings, options.window, outcome, options.sidecar_url))
    if "error" in outcome:
        _print_unreachable(outcome["error"], options.as_json)
        return EXIT_UNREACHABLE
    entries, snapshot, seconds = outcome["entries"], outcome["snapshot"], outcome["seconds"]
    cost: DraftCost = outcome["cost"]
    final = _legacy_verdict(snapshot, settings) or overall_verdict(entries)
    buckets = outcome.get("buckets")
    source: SplitSource = outcome["split_source"]
    batches = outcome["batch_buckets"]
    calibration = settings.loaded_calibration
    schedule = None if calibration is None else calibration.schedule
    if options.as_json:
        result = _as_json(settings, cost, entries, snapshot=snapshot, seconds=seconds, final=final)
        result["temperature_split_source"] = source
        if buckets is not None:
            result["buckets"] = [bucket.as_json() for bucket in buckets]
        result["batch_buckets"] = [row.as_json() for row in batches]
        result["proposed_schedule"] = None if schedule is None else schedule.model_dump()
        result["batch_bucket_note"] = CONCURRENCY_IS_NOT_BATCH_SIZE
        result.update(_engine_json(outcome))
        print(redact_url(json.dumps(result, indent=2)))
    else:
        text = _as_text(settings, cost, entries, snapshot=snapshot, seconds=seconds, final=final)
        print(redact_url(text))
        print("\n" + "\n".join(_engine_lines(outcome)))
        if buckets is not None:
            print("\n" + bucket_table(buckets, SPLIT_TITLES[source]))
        if batches:
            print("\n" + batch_table(batches, schedule))
    return final.exit_code


async def _measure(
    settings: VllmTarget, window: float, outcome: dict[str, Any], sidecar_url: str | None
) -> None:
    timeline: Timeline[SeriesKey] = Timeline(window)
    async with httpx.AsyncClient(trust_env=False, verify=settings.vllm_ssl_context()) as client:
        scraper = Scraper(
            client,
            settings.vllm_url,
            timeout=settings.scrape_timeout,
            max_body_bytes=settings.max_body_bytes,
            probe_dir=None if settings.probe_dir is None else str(settings.probe_dir),
        )
        tap = TapReader(client, sidecar_url) if sidecar_url else None
        try:
            first = await scraper.scrape()
            tap_before = await tap.read() if tap else {}
            timeline.observe(time.monotonic(), first.snapshot.counters)
            await asyncio.sleep(window)
            second = await scraper.scrape()
            tap_after = await tap.read() if tap else {}
        except ScrapeError as failure:
            detail = _scrape_detail(failure)
            outcome["error"] = UnreachableError(settings.vllm_url, detail, "--vllm-url")
            return
        except (httpx.HTTPError, NotASidecarError) as exc:
            assert sidecar_url is not None  # only the tap's reads raise them
            detail = (
                f"not a specdec-exporter sidecar: {exc}"
                if isinstance(exc, NotASidecarError)
                else describe_http_error(exc)
            )
            outcome["error"] = UnreachableError(
                sidecar_url, detail, "--sidecar-url", what="the sidecar"
            )
            return
    timeline.observe(time.monotonic(), second.snapshot.counters)
    measured = timeline.window()
    served = sorted(second.snapshot.models)
    choice = settings.speculative_choice(
        second.probe.speculative_config, served[0] if len(served) == 1 else None
    )
    cost = choice.cost
    outcome.update(speculative=choice, probe_info=second.probe.info)
    # The probe wins over the tap, as in the sidecar (sidecar/split.py): it counts every sequence.
    source: SplitSource = (
        "probe" if second.probe.temperature_split else "tap" if tap is not None else "none"
    )
    if source == "probe":
        tap_before, tap_after = probe_bucket_counts(first.probe), probe_bucket_counts(second.probe)
    if source != "none":
        outcome["buckets"] = bucket_rows(
            tap_before,
            tap_after,
            snapshot=second.snapshot,
            seconds=measured.seconds,
            cost=cost,
            criteria=settings.criteria,
        )
    batch = batch_window(first.probe, second.probe, measured.seconds)
    outcome["split_source"] = source
    outcome["batch_buckets"] = batch_entries(
        second.snapshot,
        batch.deltas,
        seconds=measured.seconds,
        cost=cost,
        criteria=settings.criteria,
        calibration=settings.loaded_calibration,
    )
    outcome.update(
        entries=build_report(second.snapshot, measured, cost, settings.criteria),
        cost=cost,
        snapshot=second.snapshot,
        seconds=measured.seconds,
    )


def _engine_json(outcome: dict[str, Any]) -> dict[str, Any]:
    """The engine probe's state and the method the figures rest on, where it came from
    (``engine``, ``flag``, ``none``), vLLM's config as the probe read it, and a disagreement."""
    choice: SpeculativeChoice = outcome["speculative"]
    info: ProbeInfo | None = outcome["probe_info"]
    return {**choice.as_json(), "engine_probe": None if info is None else info.as_json()}


def _engine_lines(outcome: dict[str, Any]) -> list[str]:
    """The same in words; a flag vLLM's config contradicts is also one line on stderr."""
    choice: SpeculativeChoice = outcome["speculative"]
    if choice.mismatch is not None:
        print(f"specdec-exporter check: warning: {choice.mismatch}", file=sys.stderr)
    return probe_state_lines(outcome["probe_info"], choice)


def _legacy_verdict(snapshot: Snapshot, settings: VllmTarget) -> Verdict | None:
    """V0 servers: only vLLM's own cumulative-since-start gauge is honest (no L, so no speedup)."""
    rates = [
        g.acceptance_rate for g in snapshot.legacy_v0.values() if g.acceptance_rate is not None
    ]
    if not snapshot.legacy_v0:
        return None
    return verdict(
        True, 1.0 if rates else 0.0, min(rates) if rates else None, criteria=settings.criteria
    )


def _as_json(
    settings: VllmTarget,
    cost: DraftCost,
    entries: list[Entry],
    *,
    snapshot: Snapshot,
    seconds: float,
    final: Verdict,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "vllm_url": settings.vllm_url,
        "window_seconds": round(seconds, 3),
        "spec_decode_enabled": snapshot.spec_decode_enabled,
        "verdict": final.value,
        "exit_code": final.exit_code,
        "explanation": _explanation(settings, cost, entries, final),
        "threshold": settings.threshold,
        "healthy_above": settings.healthy_above,
        "draft_cost_ratio": cost.ratio,
        "draft_cost_ratio_source": cost.source,
        "speculative_method": settings.speculative_method,
        "entries": [e.as_json() for e in entries],
    }
    if snapshot.legacy_v0:
        result["legacy_v0"] = {
            model: {
                "draft_acceptance_rate_since_start": g.acceptance_rate,
                "system_efficiency_since_start": g.efficiency,
            }
            for model, g in snapshot.legacy_v0.items()
        }
    return result


def _as_text(
    settings: VllmTarget,
    cost: DraftCost,
    entries: list[Entry],
    *,
    snapshot: Snapshot,
    seconds: float,
    final: Verdict,
) -> str:
    headers = (
        "model",
        "engine",
        "acceptance",
        "mean len",
        "per position",
        "draft share",
        "drafts/s",
        "speedup*",
        "break-even",
        "verdict",
    )
    rows = [
        (
            e.model_name,
            e.engine,
            e.acceptance_rate,
            e.mean_acceptance_length,
            " ".join("-" if r is None else f"{r:.2f}" for r in e.per_position_acceptance_rate),
            e.draft_share,
            e.drafts_per_second,
            e.estimated_speedup,
            e.break_even_acceptance_rate,
            e.verdict,
        )
        for e in rows_to_show(entries, lambda e: (e.model_name, e.engine))
    ]
    lines = [
        f"vLLM {settings.vllm_url}, window {seconds:.1f} s, threshold t = "
        f"{settings.threshold:g}, {cost.describe()}",
        "",
        render_table(headers, rows),
    ]
    for model, gauges in sorted(snapshot.legacy_v0.items()):
        lines.append(
            f"legacy V0 engine ({model}): vLLM's own acceptance rate since start "
            f"{gauges.acceptance_rate}; V0 counters are inflated, not windowed"
        )
    lines += [
        "",
        "* modelled: L / (1 + k*c); break-even: the acceptance at which it is 1",
        f"verdict: {final.value}: {_explanation(settings, cost, entries, final)}",
    ]
    return "\n".join(lines)


def _explanation(
    settings: VllmTarget, cost: DraftCost, entries: list[Entry], final: Verdict
) -> str:
    """The verdict's reason, with the figures of the (first) model that gave it."""
    aggregates = [e for e in entries if e.engine == ALL_ENGINES and e.verdict == final.value]
    worst = aggregates[0] if aggregates else None
    return explain(
        final,
        acceptance_rate=worst.acceptance_rate if worst else None,
        speedup=worst.estimated_speedup if worst else None,
        break_even=worst.break_even_acceptance_rate if worst else None,
        cost=cost,
        criteria=settings.criteria,
    )


def _scrape_detail(failure: ScrapeError) -> str:
    """What a failed scrape of /metrics means to a person (the reason is the metric's label)."""
    return {
        "connect": "cannot connect",
        "timeout": "no answer within --scrape-timeout",
        "http_status": f"GET /metrics answered {failure.detail}",
    }.get(failure.reason, f"GET /metrics: {failure.detail}")


def _print_unreachable(error: UnreachableError, as_json: bool) -> None:
    if as_json:
        print(
            json.dumps(
                {
                    "vllm_url": error.url,
                    "verdict": "unreachable",
                    "exit_code": EXIT_UNREACHABLE,
                    "error": str(error),
                    "entries": [],
                },
                indent=2,
            )
        )
    else:
        print(f"specdec-exporter check: {error}", file=sys.stderr)

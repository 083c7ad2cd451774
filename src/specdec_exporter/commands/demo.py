"""The `demo` command: simulator + sidecar (+ tap) + mixed-temperature load, with a live table.

The sidecar runs as a real `specdec-exporter run` subprocess; the simulator in a thread of this
process; the load in this process' event loop. Halfway through, the simulated drafter degrades.
Every frame of the live table starts with the live page's URL and how to stop, and fits the
terminal (80x24 included), so the URL never scrolls off; the last frame ends with a summary and
the command to run next.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Annotated, Any

import httpx
from pydantic import Field

from specdec_exporter.commands.exits import EXIT_INTERRUPTED, UnreachableError
from specdec_exporter.commands.flags import FlagsOnly, add_settings_flags, settings_from_args
from specdec_exporter.core.report import rows_to_show
from specdec_exporter.deadline import total_deadline
from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.runner import (
    ModelLookupError,
    Progress,
    build_client,
    fetch_model,
    run_load,
)
from specdec_exporter.options import (
    FromEnv,
    HttpUrl,
    Seed,
    environment_variable,
    flag_of,
    redact_url,
)
from specdec_exporter.sidecar.config import ListenAddress
from specdec_exporter.sidecar.config import Settings as SidecarSettings
from specdec_exporter.term import Cell, format_cell, render_table, run_event_loop
from specdec_exporter.trust import VllmTrust

DEMO_MIX = "0:0.3,0.3:0.2,0.6:0.2,0.85:0.15,1.2:0.15"
"""One temperature in each of the sidecar's default buckets (0, 0-0.5, 0.5-0.7, 0.7-1.0, 1.0+),
so every bucket row gets traffic."""
SIDE_CALL_SECONDS = 5.0
"""Deadline of the demo's own calls: the live table's report, the simulator's drafter switch."""
GOOD_DRAFTER = 0.97
DEGRADED_DRAFTER = 0.45
LISTEN_VARIABLE = environment_variable(SidecarSettings, "listen") or "SPECDEC_LISTEN"
"""The sidecar's own variable for its address (`run`'s --listen): the demo honours it too."""
SCREEN = (80, 24)
"""The frame's size when the terminal's is unknown (not a terminal: no height limit)."""


class DemoSettings(FlagsOnly, VllmTrust):
    """The demo's flags."""

    duration: float = Field(
        120.0, ge=1, le=86400, description="seconds of load; the drafter degrades halfway"
    )
    vllm_url: HttpUrl | None = Field(
        None,
        description="base URL of a vLLM to use instead of the built-in simulator, with or "
        "without /v1 (nothing is degraded then)",
    )
    concurrency: int = Field(8, ge=1, le=1000, description="concurrent requests")
    refresh: float = Field(2.0, ge=0.1, le=3600, description="table refresh, seconds")
    no_tap: bool = Field(
        False, description="send the load straight to vLLM instead of through the tap"
    )
    seed: Seed = Field(1, description="seed of simulator and load")
    listen: Annotated[ListenAddress, FromEnv(LISTEN_VARIABLE)] = Field(
        "127.0.0.1:0",
        description="HOST:PORT of the sidecar's live page and /metrics (port 0: a free one)",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, DemoSettings)


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(DemoSettings, args)
    with contextlib.ExitStack() as stack:
        vllm_url, simulated = settings.vllm_url, settings.vllm_url is None
        if vllm_url is None:
            vllm_url = stack.enter_context(_simulator(settings.seed))
        model = run_event_loop(_served_model(vllm_url, settings))
        sidecar = stack.enter_context(
            _sidecar(vllm_url, settings, tap=not settings.no_tap, listen=settings.listen)
        )
        links = Links(vllm_url, sidecar.url, sidecar.tap_url, simulated)
        print(links.text() + "\n", flush=True)
        if run_event_loop(_run(settings, links, model)):
            print("\ninterrupted; stopping the sidecar and the simulator", file=sys.stderr)
            return EXIT_INTERRUPTED
    return 0


async def _served_model(vllm_url: str, trust: VllmTrust) -> str:
    """The model vLLM serves, asked of vLLM itself before anything starts: an unreachable vLLM
    is one line (UnreachableError), not a demo that shows "vLLM DOWN" and then fails."""
    config = LoadConfig(url=vllm_url, requests=1, timeout=10, **trust.vllm_trust())
    async with build_client(config) as client:
        try:
            return await fetch_model(client, config.timeout)
        except ModelLookupError as exc:
            raise UnreachableError(vllm_url, str(exc), "--vllm-url") from None


@contextlib.contextmanager
def _simulator(seed: int) -> Iterator[str]:
    from specdec_exporter.devtools.sim.server import running_simulator  # noqa: PLC0415
    from specdec_exporter.devtools.sim.settings import SimConfig, SpeculativeConfig  # noqa: PLC0415

    config = SimConfig(
        speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=4),
        per_request_spec_decode_metrics="summary",
        seed=seed,
        drafter_quality=GOOD_DRAFTER,
        probe=True,  # as vLLM serves it with the engine probe on its PYTHONPATH (docs/probe.md)
    )
    with running_simulator(config) as simulator:
        yield simulator.url


@dataclass
class Sidecar:
    process: subprocess.Popen[str]
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.addresses['metrics']}"

    @property
    def tap_url(self) -> str | None:
        return f"http://{self.addresses['tap']}" if "tap" in self.addresses else None


def sidecar_command(trust: VllmTrust, *, tap: bool, listen: str = "127.0.0.1:0") -> list[str]:
    """The `run` command the demo starts, trusting vLLM as the demo was told, its page where
    --listen (or SPECDEC_LISTEN) says. The vLLM URL goes in its environment
    (``sidecar_environment``), not its arguments, which any user can list."""
    command = [
        sys.executable,
        "-m",
        "specdec_exporter.cli",
        "run",
        "--listen",
        listen,
        "--interval",
        "1",
        "--window",
        "10",
        "--speculative-method",
        "draft_model",
    ]
    if tap:
        command += ["--proxy-listen", "127.0.0.1:0"]
    for name, path in trust.vllm_trust().items():
        if path is not None:
            command += [flag_of(VllmTrust, name), str(path)]
    return command


def sidecar_environment(vllm_url: str) -> dict[str, str]:
    """The sidecar's environment: this process', with the demo's vLLM as SPECDEC_VLLM_URL."""
    return {**os.environ, "SPECDEC_VLLM_URL": vllm_url}


@contextlib.contextmanager
def _sidecar(vllm_url: str, trust: VllmTrust, *, tap: bool, listen: str) -> Iterator[Sidecar]:
    command = sidecar_command(trust, tap=tap, listen=listen)
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env=sidecar_environment(vllm_url)
    )
    sidecar = Sidecar(process)
    ready = threading.Event()
    assert process.stderr is not None
    threading.Thread(
        target=_read_log, args=(process.stderr, sidecar, 1 + tap, ready), daemon=True
    ).start()
    try:
        if not ready.wait(30):
            raise RuntimeError("the sidecar did not start within 30 s")
        yield sidecar
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read_log(stream: IO[str], sidecar: Sidecar, expected: int, ready: threading.Event) -> None:
    """Collect the sidecar's announced addresses; drop the rest (it logs JSON lines)."""
    for line in stream:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("msg") == "listening":
                sidecar.addresses[record["component"]] = record["address"]
                if len(sidecar.addresses) == expected:
                    ready.set()
    stream.close()


@dataclass(frozen=True)
class Links:
    """Where the demo's parts answer; every frame of the live table starts with them."""

    vllm_url: str
    sidecar_url: str
    tap_url: str | None
    simulated: bool

    def text(self, *, finished: bool = False) -> str:
        """The live page first (every frame's first line), then one address a line."""
        source = "simulated vLLM" if self.simulated else "vLLM"
        stop = "the demo is over: the sidecar stops now" if finished else "Ctrl-C stops everything"
        lines = [
            f"live page: {self.sidecar_url}/  ({stop})",
            f"metrics: {self.sidecar_url}/metrics  {source}: {redact_url(self.vllm_url)}",
        ]
        if self.tap_url:
            lines.append(f"request tap (OpenAI-compatible): {self.tap_url}/v1")
        return "\n".join(lines)


async def _run(args: DemoSettings, links: Links, model: str) -> bool:
    """Load and live table until the duration ends (False) or SIGINT/SIGTERM (True)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    vllm_url, simulated = links.vllm_url, links.simulated
    config = LoadConfig(
        url=links.tap_url or vllm_url,
        model=model,
        concurrency=args.concurrency,
        duration=args.duration,
        mix=parse_mix(DEMO_MIX),
        stream_share=0.5,
        max_tokens=96,
        seed=args.seed,
        **args.vllm_trust(),
    )
    progress: list[Progress] = []
    started = time.monotonic()
    load = asyncio.create_task(run_load(config, progress.append))
    stopping = asyncio.create_task(stop.wait())
    before: dict[str, Any] | None = None  # the last frame's model row before the drafter degraded
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        degraded_at: float | None = None
        while not load.done() and not stop.is_set():
            elapsed = time.monotonic() - started
            if simulated and degraded_at is None and elapsed >= args.duration / 2:
                async with total_deadline(SIDE_CALL_SECONDS):
                    await client.post(f"{vllm_url}/sim/drafter", json={"quality": DEGRADED_DRAFTER})
                degraded_at = elapsed
            report = await _fetch_report(client, links.sidecar_url)
            if degraded_at is None:
                before = _model_row(report) or before
            _show(
                render_screen(
                    report,
                    links=links,
                    elapsed=elapsed,
                    duration=args.duration,
                    degraded_at=degraded_at,
                    progress=progress[-1] if progress else None,
                    simulated=simulated,
                )
            )
            await asyncio.wait(
                {load, stopping}, timeout=args.refresh, return_when=asyncio.FIRST_COMPLETED
            )
        if stop.is_set():
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
            return True
        stopping.cancel()
        result = load.result()
        await asyncio.sleep(1.5)  # one more sidecar poll, so the final table includes the tail
        report = await _fetch_report(client, links.sidecar_url)
    elapsed = time.monotonic() - started
    errors = sum(1 for r in result.results if r.error)
    _show(
        render_screen(
            report,
            links=links,
            finished=True,
            elapsed=elapsed,
            duration=args.duration,
            degraded_at=degraded_at,
            progress=progress[-1] if progress else None,
            simulated=simulated,
            summary=summary_lines(
                before=before,
                after=_model_row(report),
                degraded_at=degraded_at,
                requests=len(result.results),
                errors=errors,
                links=links,
            ),
        ),
    )
    return False


async def _fetch_report(client: httpx.AsyncClient, sidecar_url: str) -> dict[str, Any]:
    try:
        async with total_deadline(SIDE_CALL_SECONDS):
            response = await client.get(f"{sidecar_url}/api/report")
        return dict(response.json())
    except (httpx.HTTPError, ValueError):
        return {"up": False, "entries": [], "tables": []}


def _model_row(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first model's row over all its engines (its only engine's row if it has one)."""
    entries = report.get("entries") or []
    if not entries:
        return None
    rows = [e for e in entries if e["model_name"] == entries[0]["model_name"]]
    return dict(next((e for e in rows if e["engine"] == "all"), rows[0]))


def _figure(row: Mapping[str, Any] | None) -> str:
    if row is None or row.get("acceptance_rate") is None:
        return "no figures"
    return f"acceptance {format_cell(row['acceptance_rate'])} ({row['verdict']})"


def summary_lines(
    *,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    degraded_at: float | None,
    requests: int,
    errors: int,
    links: Links,
) -> list[str]:
    """The last frame's end: what happened, then the command to run next."""
    if degraded_at is not None:
        what = [
            f"  {_figure(before)} with the good drafter,",
            f"  {_figure(after)} after it degraded at {degraded_at:.0f} s",
        ]
    else:
        what = [f"  {_figure(after)} over the last window"]
    target = "http://YOUR-VLLM:8000" if links.simulated else links.vllm_url
    return [
        f"summary: {requests} requests, {errors} errors",
        *what,
        f"next: specdec-exporter check --vllm-url {target}",
        "      (a verdict for your vLLM in seconds; Kubernetes: the README's quick start)",
    ]


def render_screen(
    report: dict[str, Any],
    *,
    links: Links,
    elapsed: float,
    duration: float,
    degraded_at: float | None,
    progress: Progress | None,
    simulated: bool,
    finished: bool = False,
    summary: Sequence[str] = (),
    size: tuple[int, int | None] | None = None,
) -> str:
    """One frame: the links and how to stop, the status, then the sidecar's figures per model
    (and engine when there are several), per temperature bucket and per load level, as many as
    fit ``size`` (columns, rows; None rows: no limit), then the footnote or ``summary``. The
    first line, the live page's URL, is always there: nothing pushes it off the screen."""
    columns, rows = size or _screen()
    drafter = (
        ("good" if degraded_at is None else f"DEGRADED at {degraded_at:.0f} s")
        if simulated
        else "real vLLM"
    )
    requests = (
        f"{progress.done} requests, {progress.errors} errors"
        if progress
        else "no request finished yet"
    )
    window = report.get("window_seconds") or report.get("configured_window_seconds")
    head = [
        *links.text(finished=finished).splitlines(),
        f"demo {min(elapsed, duration) if finished else elapsed:.0f}/{duration:.0f} s  "
        f"drafter: {drafter}  load: {requests}",
        f"vLLM {'up' if report.get('up') else 'DOWN'}"
        + (f"  sidecar window {window:.0f} s" if window else ""),
    ]
    sections = [
        _model_table(report),
        *_bucket_tables(report),
        *_load_levels(report.get("batch_buckets", [])),
    ]
    foot = list(summary) or ["* modelled: L / (1 + k*c); below 1, speculation is a net loss"]
    return "\n".join(_cut(line, columns) for line in _fit(head, sections, foot, rows))


def _screen() -> tuple[int, int | None]:
    """The terminal's columns and rows; not a terminal: 80 columns, no row limit (nothing
    clears the screen, so nothing scrolls a URL off)."""
    columns, rows = shutil.get_terminal_size(SCREEN)
    return columns, (rows if sys.stdout.isatty() else None)


def _fit(
    head: list[str], sections: list[list[str]], foot: list[str], rows: int | None
) -> list[str]:
    """Head, then whole sections while they fit, then foot, in at most ``rows - 1`` lines (the
    cursor's line): a section that does not fit is left to the live page, never cut."""
    budget = None if rows is None else max(rows - 1, len(head) + len(foot))
    lines, left_out = list(head), 0
    for section in sections:
        need = len(lines) + len(section) + len(foot) + 1  # + the "more on the live page" line
        if budget is None or need <= budget:
            lines += section
        else:
            left_out += 1
    if left_out:
        tables = "table" if left_out == 1 else "tables"
        lines.append(f"({left_out} more {tables} on the live page, its URL on the first line)")
    return lines + foot


def _cut(line: str, columns: int) -> str:
    return line if len(line) <= columns else line[: max(columns - 1, 1)] + "…"


def _short(model: str) -> str:
    """``meta-llama/Llama-3.1-8B-Instruct`` -> ``Llama-3.1-8B-Instruct``: the table fits 80."""
    return model.rsplit("/", 1)[-1]


FIGURES = ("accept", "len", "speedup*", "drafts/s", "verdict")
"""The compact columns: acceptance rate, mean acceptance length, modelled speedup, drafts/s."""


def _figures(row: Mapping[str, Any]) -> tuple[Cell, ...]:
    return (
        row["acceptance_rate"],
        row["mean_acceptance_length"],
        row["estimated_speedup"],
        row["drafts_per_second"],
        row["verdict"],
    )


def _model_table(report: Mapping[str, Any]) -> list[str]:
    """Per model, and per engine where a model has several (with their "all" row)."""
    entries = rows_to_show(report.get("entries", []), lambda e: (e["model_name"], e["engine"]))
    several = any(e["engine"] == "all" for e in entries)
    rows = [
        (_short(e["model_name"]), *((e["engine"],) if several else ()), *_figures(e))
        for e in entries
    ]
    headers = ("model", *(("engine",) if several else ()), *FIGURES)
    return render_table(headers, rows).splitlines()


def _bucket_tables(report: Mapping[str, Any]) -> list[list[str]]:
    """Per temperature bucket over the window, from whichever source feeds the split."""
    buckets = report.get("buckets", [])
    if not buckets:
        return []
    source = {"probe": "engine probe", "tap": "request tap"}.get(
        str(report.get("temperature_split_source")), "split"
    )
    several = len({b["model_name"] for b in buckets}) > 1
    rows = [
        (*((_short(b["model_name"]),) if several else ()), b["temperature_bucket"], *_figures(b))
        for b in buckets
    ]
    headers = (*(("model",) if several else ()), "temperature", *FIGURES)
    return [
        [f"By temperature bucket ({source}, window)", *render_table(headers, rows).splitlines()]
    ]


def _load_levels(batch_buckets: list[dict[str, Any]]) -> list[list[str]]:
    """Acceptance per running-batch bucket (the engine probe's load split) where steps drafted in
    the window, when vLLM has the probe."""
    drafting = [b for b in batch_buckets if b["steps"]]
    if not drafting:
        return []
    several = len({(b["model_name"], b["engine"]) for b in drafting}) > 1
    rows = [
        (
            *((_short(b["model_name"]), b["engine"]) if several else ()),
            b["batch_bucket"],
            int(b["steps"]),
            b["acceptance_rate"],
            b["mean_acceptance_length"],
            b["estimated_speedup"],
            b["verdict"],
        )
        for b in drafting
    ]
    headers = (*(("model", "engine") if several else ()), "batch", "steps", "accept", "len")
    title = "By load level (engine probe; a running batch is not a client concurrency)"
    return [[title, *render_table((*headers, "speedup*", "verdict"), rows).splitlines()]]


def _show(screen: str) -> None:
    """One frame; on a terminal, alone on the cleared screen."""
    if sys.stdout.isatty():
        sys.stdout.write("\x1b[H\x1b[2J")
    sys.stdout.write(screen + "\n")
    sys.stdout.flush()

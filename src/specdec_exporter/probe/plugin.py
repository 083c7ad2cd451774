"""The engine probe: a vLLM stat-logger plugin (entry point ``vllm.stat_logger_plugins``).

vLLM's ``AsyncLLM`` makes one ``SpecdecProbeStatLogger`` per engine index in every API-server
process. The first one starts the probe for the process (``start``): it reads the bucket edges
from the environment, checks every vLLM name the probe relies on (``hooks.EXPECTATIONS``),
registers the families, wraps ``OutputProcessor._update_stats_from_finished`` once, sets the info
series and logs one line. Two splits, each switched off alone when it cannot work:

- temperature: per finished sequence, from the request state the wrapped method receives
  (``temperature``, ``spec_decode_metrics``, ``stats``);
- batch: per engine step, from ``record()`` (``spec_decoding_stats``, ``num_running_reqs``).

Nothing here raises into vLLM after start-up: an error inside a hook is counted in
``specdec_probe_errors_total{hook}`` and vLLM goes on. The probe reads no prompt, no output text
and no token ids: only the temperature, the speculative counts and the timing stats.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase  # type: ignore[import-not-found]

from specdec_exporter import __version__
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.buckets import (
    BATCH_BUCKETS_ENV,
    DEFAULT_BATCH_EDGES,
    DEFAULT_EDGES,
    TEMPERATURE_BUCKETS_ENV,
    BatchBuckets,
    TemperatureBuckets,
    parse_edges,
)
from specdec_exporter.core.buckets import is_valid_temperature as _is_valid_temperature
from specdec_exporter.core.probe_files import PROBE_DIR_ENV
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.probe import hooks
from specdec_exporter.probe.counting import (
    count,
    seconds,
    sequence_figures,
    step_figures,
    time_per_output_token,
)
from specdec_exporter.probe.families import (
    ERROR_LOG_INTERVAL,
    FORKS,
    Families,
    SequenceRow,
    StepRow,
)
from specdec_exporter.probe.files import ProbeFiles

LOG = logging.getLogger("vllm.specdec_probe")
"""A child of vLLM's logger, so the probe's one line comes out in vLLM's log format."""
WRAPPED_MARK = "__specdec_probe_wrapped__"
"""The info series' ``reason`` label is cut to this many characters."""
STEP_ROWS_LIMIT = 4096
"""Bound of ``ProbeState.step_rows``: engine indexes x running-batch sizes seen (vLLM's
``max_num_seqs`` bounds the sizes); past it a step looks its row up again."""
STEP_FLUSH_EVERY = 64
"""Under ``PROMETHEUS_MULTIPROC_DIR``: steps at most between two drains."""
DRAIN_EVERY = 1.0
"""With the probe's own files (``SPECDEC_PROBE_DIR``): seconds at least between two drains that a
finished request asks for. The hooks only keep what they see; a drain counts it many at a time, in
a warm loop, where one at a time each sequence ran cold at ~30 us (BENCHMARKS.md, issue 30). A
request that finishes a second or more after the last drain asks for one, made at the step that
finished it (so a drain that counts a request has its last step too); with no request finishing,
vLLM's ``log()`` (``VLLM_LOG_STATS_INTERVAL``, 10 s) drains, or a step at ``INBOX_LIMIT``. The
files lag vLLM's counters by that much: nothing reads them at the instant vLLM's /metrics is
read anyway."""
INBOX_LIMIT = 1024
"""Steps, and finished sequences, at most in ``ProbeState.steps`` and ``finished`` when nobody
scrapes: a hook drains them then (0.5-3 ms of vLLM's loop, what the hooks would have spent on
them one by one; a step is a tuple of five ints, ~90 bytes; a sequence holds vLLM's two small
figure objects, a few hundred bytes)."""
TEMPERATURES_LIMIT = 256
"""Bound of ``ProbeState.row_by_temperature``: past it a new temperature finds its row the
long way, each time."""


@dataclass(slots=True)
class ProbeState:
    """What the probe knows in this process, set once by ``start``."""

    families: Families
    model_name: str
    temperature_buckets: TemperatureBuckets | None
    """None: the temperature split is off."""
    batch_buckets: BatchBuckets | None
    """None: the batch split is off."""
    positions: int
    """k, the configured number of speculative tokens (0 without speculation)."""
    errors_logged_at: dict[str, float] = field(default_factory=dict)
    """When each hook's last error was logged (``time.monotonic``)."""
    step_rows: dict[tuple[Any, Any], StepRow] = field(default_factory=dict)
    """(engine index, running requests) -> its row, so that a step costs one dict lookup and no
    label work (at most ``STEP_ROWS_LIMIT`` entries; many keys share a row)."""
    flush_in_hooks: bool = False
    """Set when a scrape does not drain (``not Families.flush_at_scrape``)."""
    drain_every: float | None = None
    """Set with the probe's own files: a finished request asks the step hooks for a drain when
    this many seconds passed since the last one asked (``DRAIN_EVERY``)."""
    next_drain: float = 0.0
    """``time.monotonic()`` from which a finished request asks for a drain (with
    ``drain_every``)."""
    drain_soon: dict[Any, Callable[[], None]] = field(default_factory=dict)
    """Engine index -> its logger's step hook's (``step_hook``; a logger made again for an
    index replaces the last): its next step drains, after it keeps its own figures."""
    steps: deque[Any] = field(default_factory=deque)
    """Steps not counted yet, one tuple each: (engine index, running requests, vLLM's
    num_drafts, num_draft_tokens, num_accepted_tokens). ``deque.append`` and ``popleft`` are
    atomic: the hooks add in vLLM's loop thread while a scrape drains in its own, with no lock
    on vLLM's path, and a step is never split."""
    finished: deque[tuple[Any, Any, Any]] = field(default_factory=deque)
    """Finished sequences not counted yet: (temperature, vLLM's ``RequestSpecDecodeMetrics``,
    its ``RequestStateStats``); never the request state (its prompt and outputs)."""
    sequence_rows: dict[str, SequenceRow] = field(default_factory=dict)
    """Temperature bucket -> the pending amounts of its series (one per bucket of this model)."""
    row_by_temperature: dict[float, SequenceRow] = field(default_factory=dict)
    """A valid temperature seen -> its bucket's row (at most ``TEMPERATURES_LIMIT``): a
    sequence at a temperature seen before costs one lookup, no check and no bisect. Only
    floats, what vLLM gives (a NaN is never found: it equals nothing)."""

    def observe_finished(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """One finished sequence (the wrapped method's arguments). With one API server its
        temperature and the references to its two figure objects go into ``finished``, counted
        at the next ``drain`` (a scrape's; the step hook keeps steps the same way). When the
        rows write the process's files (``Families.direct_writes``, under
        ``PROMETHEUS_MULTIPROC_DIR``) it is counted here and now, while vLLM's objects it reads
        are still in the cache from vLLM's own use of them a moment ago (at the drain, a step
        later, each read was a cache miss: BENCHMARKS.md, issue 30), unless a drain holds the
        lock (it goes into ``finished`` then: this hook never waits). Never raises."""
        try:
            if self.temperature_buckets is None:
                return
            req_state = args[0] if args else kwargs["req_state"]
            temperature, metrics = req_state.temperature, req_state.spec_decode_metrics
            stats = req_state.stats
            families = self.families
            if (
                families.direct_writes
                and self.drain_every is None
                and families.pending_lock.acquire(blocking=False)
            ):
                try:
                    if FORKS[0] != families.forks:
                        families.forked()  # a forked child: the inbox and its flush, as below
                    else:
                        self._count_finished(temperature, metrics, stats)
                        return
                finally:
                    families.pending_lock.release()
            finished = self.finished
            finished.append((temperature, metrics, stats))
            if len(finished) >= INBOX_LIMIT:
                self.drain(blocking=False)
            elif self.drain_every is not None:
                now = time.monotonic()
                if now >= self.next_drain:  # the step that finished it drains
                    self.next_drain = now + self.drain_every
                    for soon in tuple(self.drain_soon.values()):
                        soon()
        except Exception as exc:
            self._hook_failed(names.HOOK_FINISHED, exc)

    def drain(self, *, blocking: bool = True) -> None:
        """Count what the hooks left in ``steps`` and ``finished``, each item whole or not at
        all (an item that fails its checks is an error of its hook, and moves no counter), then
        flush the rows into the series. A hook calls it non-blocking (a scrape draining now
        does the work). Never raises."""
        if not (self.steps or self.finished):
            return  # every drain flushes what it counted: nothing new, nothing to do
        lock = self.families.pending_lock
        if not lock.acquire(blocking=blocking):
            return
        try:
            families = self.families
            if families.direct_writes and FORKS[0] != families.forks:
                families.forked()  # before any write: this is a forked child
            self._count_steps(len(self.steps))  # later ones: the next drain's
            finished = self.finished
            for _ in range(len(finished)):
                self._count_finished(*finished.popleft())
            families.flush_locked()
        except Exception as exc:  # popleft of an emptied deque: a bug of ours, counted
            self._hook_failed(names.HOOK_RECORD, exc)
        finally:
            lock.release()

    def _count_finished(self, temperature: Any, metrics: Any, stats: Any) -> None:
        """One finished sequence, counted whole or not at all: every figure is read and checked
        before its row moves. What vLLM gives (a float temperature seen before, float times, an
        int token count) takes the short way: under ``PROMETHEUS_MULTIPROC_DIR`` this runs cold
        at each step that finishes a request, and each call costs a few microseconds there
        (BENCHMARKS.md); anything else goes through the checks that raise."""
        try:
            row = self.row_by_temperature.get(temperature) if type(temperature) is float else None
            label = None
            if row is None:
                label = self._label_for(temperature)
                if label is None:
                    return  # the split is off, or a pooling request (no sampled sequence)
            figures = rate = None
            if metrics is not None:
                figures, rate = sequence_figures(
                    metrics.histogram, metrics.num_draft_tokens, self.positions
                )
            timing = None
            if stats is not None:
                ttft, tokens = stats.first_token_latency, stats.num_generation_tokens
                if not (type(tokens) is int and tokens >= 0):
                    tokens = count(tokens)
                tpot = time_per_output_token(stats.first_token_ts, stats.last_token_ts, tokens)
                if not (type(ttft) is float and 0.0 <= ttft < math.inf):
                    ttft = seconds(ttft)
                if not (type(tpot) is float and 0.0 <= tpot < math.inf):
                    tpot = seconds(tpot)
                timing = (ttft, tpot)
            # Every figure is read and checked above: from here on only the row moves.
            if row is None:
                row = self._row(temperature, label)
            row.count(figures, rate, timing)
        except Exception as exc:
            self._hook_failed(names.HOOK_FINISHED, exc)

    def _label_for(self, temperature: Any) -> str | None:
        """The temperature's bucket (None: the split is off, or no temperature); ValueError
        for what no temperature is."""
        buckets = self.temperature_buckets
        if buckets is None or temperature is None:
            return None
        if not _is_valid_temperature(temperature):
            raise ValueError("temperature is not a finite non-negative number")
        return buckets.label_for(float(temperature))

    def _row(self, temperature: Any, label: Any) -> SequenceRow:
        """The bucket's row, made with its series the first time (after the sequence passed its
        checks: a rejected one makes no series), remembered for a float temperature
        (``row_by_temperature``)."""
        row = self.sequence_rows.get(label)
        if row is None:
            row = self.families.sequence_row_locked(self.model_name, label, self.positions)
            self.sequence_rows[label] = row
        if type(temperature) is float and len(self.row_by_temperature) < TEMPERATURES_LIMIT:
            self.row_by_temperature[temperature] = row
        return row

    def _count_steps(self, n: int) -> None:
        """The first ``n`` steps of ``steps``, each counted whole or not at all, in one loop (no
        call a step: 120 steps a request at 256 tokens and concurrency 1)."""
        buckets = self.batch_buckets
        pop = self.steps.popleft
        rows = self.step_rows
        for _ in range(n):
            engine_idx, running, drafts, draft_tokens, accepted = pop()
            try:
                if buckets is None:
                    continue  # the split is off: the hook adds none
                if not (
                    type(running) is int
                    and type(drafts) is int
                    and type(draft_tokens) is int
                    and type(accepted) is int
                    and running >= 0
                    and drafts >= 0
                    and 0 <= accepted <= draft_tokens
                ):  # the checked slow path: raises for what no count can be
                    running, drafts, draft_tokens, accepted = step_figures(
                        running, drafts, draft_tokens, accepted
                    )
                row = rows.get((engine_idx, running))
                if row is None:
                    row = self._step_row(buckets, engine_idx, running)
                pending = row.pending
                if not pending[0]:
                    row.dirty.append(row)  # its first step since a flush
                pending[0] += 1
                pending[1] += drafts
                pending[2] += draft_tokens
                pending[3] += accepted
            except Exception as exc:
                self._hook_failed(names.HOOK_RECORD, exc)

    def _step_row(self, buckets: BatchBuckets, engine_idx: Any, running: Any) -> StepRow:
        engine, label = str(count(engine_idx)), buckets.label_for(count(running))
        row = self.families.step_row_locked(self.model_name, engine, label)
        if len(self.step_rows) < STEP_ROWS_LIMIT:
            self.step_rows[(engine_idx, running)] = row
        return row

    def _hook_failed(self, hook: str, exc: Exception) -> None:
        """Count the error; log one line per hook at most every ``ERROR_LOG_INTERVAL`` seconds:
        its type and where it was raised, never its message (which may quote a request). Never
        raises."""
        self.families.count_error(hook)
        with contextlib.suppress(Exception):
            now = time.monotonic()
            last = self.errors_logged_at.get(hook)
            if last is not None and now - last < ERROR_LOG_INTERVAL:
                return
            self.errors_logged_at[hook] = now
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            LOG.warning(
                "specdec probe: %s in its %s hook at %s:%s, counted in "
                "specdec_probe_errors_total; vLLM goes on (at most one such line per hook every "
                "%d s)",
                type(exc).__name__,
                hook,
                os.path.basename(frame.filename),
                frame.lineno,
                ERROR_LOG_INTERVAL,
            )


_STATE: ProbeState | None = None
_START_FAILED = False
"""Set once a start failed: the other engines' loggers of the process stay off without a second
line."""
_START_LOCK = threading.Lock()
REGISTRY: Any = None
"""The registry the families go into; None: prometheus_client's default (vLLM's /metrics)."""


class SpecdecProbeStatLogger(StatLoggerBase):  # type: ignore[misc]
    """vLLM makes one per engine index; all of a process share one ``ProbeState``."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.state = state = start(vllm_config, engine_index)
        if state is not None:
            self.record = step_hook(state, engine_index)  # type: ignore[method-assign]

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """vLLM's per-step call when the probe is off in this process: nothing to do. With the
        probe on, ``__init__`` sets the instance's ``record`` to ``step_hook(state)``."""
        return None

    def log_engine_initialized(self) -> None:
        return None

    def log(self) -> None:
        """vLLM's periodic call (``VLLM_LOG_STATS_INTERVAL``): under
        ``PROMETHEUS_MULTIPROC_DIR`` what is not yet in the counters goes in, so it lags by at
        most that long when no request finishes. Never raises."""
        state = self.state
        if state is not None and state.flush_in_hooks:
            state.drain()


def step_hook(state: ProbeState, engine_index: Any = 0) -> Callable[..., None]:
    """The loggers' ``record`` with the probe on: vLLM's per-step call.

    The step's engine index, running requests and three speculative counts go into
    ``state.steps`` as one tuple (read here, so no vLLM object outlives the step: nothing more
    for the garbage collector to walk, and nothing a later vLLM could change under it), counted
    at the next ``ProbeState.drain``. Never raises. It runs once per engine step (120 times a
    request at 256 tokens and concurrency 1), cold, between two steps of vLLM's own work, where
    each object it touches is a cache miss: one Python frame, one append and one length check,
    nothing looked up on the logger, the state or the module, no clock read (with a clock read,
    the state's next drain time and five deque entries a step it took ~4.4 us a call in place at
    256 tokens and concurrency 1, 2.4 us without: BENCHMARKS.md, issue 30, session 19).

    With one API server a scrape drains (``Families.on_collect``), and this hook only when
    ``steps`` reaches ``INBOX_LIMIT`` steps. With the probe's own files a finished request asks
    for a drain at most every ``DRAIN_EVERY`` seconds (``ProbeState.observe_finished``), which
    this hook makes at the same step, once the step is kept (and vLLM's ``log()`` when no request
    finishes): nothing reads those files with vLLM's /metrics, so the sequences and steps of a
    second are counted at once, in a warm loop. Otherwise, under ``PROMETHEUS_MULTIPROC_DIR``
    (``_multiprocess_step_hook``), every step finishing a request drains."""
    if state.drain_every is None and state.flush_in_hooks:
        return _multiprocess_step_hook(state)
    steps = state.steps
    append = steps.append
    drain = state.drain
    batch_on = state.batch_buckets is not None
    limit = drain_at = INBOX_LIMIT
    record_hook = names.HOOK_RECORD

    def drain_soon() -> None:
        nonlocal drain_at
        drain_at = 0

    def record(
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        nonlocal drain_at
        try:
            if batch_on and scheduler_stats is not None:
                spec = scheduler_stats.spec_decoding_stats
                if spec is not None:  # else no draft tokens: vLLM's counters do not move either
                    append(
                        (
                            engine_idx,
                            scheduler_stats.num_running_reqs,
                            spec.num_drafts,
                            spec.num_draft_tokens,
                            spec.num_accepted_tokens,
                        )
                    )
            if len(steps) >= drain_at:
                drain_at = limit
                drain(blocking=False)
        except Exception as exc:
            state._hook_failed(record_hook, exc)

    state.drain_soon[engine_index] = drain_soon
    return record


def _multiprocess_step_hook(state: ProbeState) -> Callable[..., None]:
    """``step_hook`` under ``PROMETHEUS_MULTIPROC_DIR`` without the probe's own files: it
    drains at the first step that finishes a request, at a step that brings no outputs, at
    least every ``STEP_FLUSH_EVERY`` steps, and at vLLM's periodic ``log()``: the probe's
    counters have every step and sequence of a request by the time vLLM counts it finished (this
    logger records before vLLM's Prometheus logger, in the same call), in every scrape. (Setting
    the drain on the event loop for later, to write many requests' sequences at once, broke
    that: a scrape right after a response had vLLM's count of it and not the probe's.
    BENCHMARKS.md.) It keeps a step as ``step_hook`` does, written out again: a shared helper
    would be one more call a step, what the hooks are kept small to avoid."""
    steps = state.steps
    append = steps.append
    drain = state.drain
    batch_on = state.batch_buckets is not None
    flush_every = STEP_FLUSH_EVERY
    record_hook = names.HOOK_RECORD

    def record(
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        try:
            if batch_on and scheduler_stats is not None:
                spec = scheduler_stats.spec_decoding_stats
                if spec is not None:
                    append(
                        (
                            engine_idx,
                            scheduler_stats.num_running_reqs,
                            spec.num_drafts,
                            spec.num_draft_tokens,
                            spec.num_accepted_tokens,
                        )
                    )
            if (
                iteration_stats is None
                or len(steps) >= flush_every
                or getattr(iteration_stats, "finished_requests", True)  # a changed vLLM
            ):
                drain()
        except Exception as exc:
            state._hook_failed(record_hook, exc)

    return record


def start(
    vllm_config: Any, engine_index: int, environ: Mapping[str, str] = os.environ
) -> ProbeState | None:
    """The process's probe, started on first use. Never raises: on a failure it logs one line and
    returns None (the probe stays out of the way)."""
    global _STATE, _START_FAILED  # noqa: PLW0603  (one probe per process, for every engine)
    with _START_LOCK:
        if _START_FAILED:
            return None
        try:
            if _STATE is None:
                _STATE = _start(vllm_config, engine_index, environ)  # this engine's rows too
            else:
                _precreate_batch(_STATE, engine_index)
            return _STATE
        except Exception as exc:
            _START_FAILED = True
            LOG.warning(
                "specdec probe: off, start-up failed (%s: %s); vLLM %s runs without it",
                type(exc).__name__,
                exc,
                _vllm_version(),
            )
            return None


def _start(vllm_config: Any, engine_index: int, environ: Mapping[str, str]) -> ProbeState:
    off: dict[str, list[str]] = hooks.check_imported()
    temperature_buckets = _edges(
        environ, TEMPERATURE_BUCKETS_ENV, DEFAULT_EDGES, TemperatureBuckets
    )
    batch_buckets = _edges(environ, BATCH_BUCKETS_ENV, DEFAULT_BATCH_EDGES, BatchBuckets)
    for split, edges in (
        (hooks.TEMPERATURE_SPLIT, temperature_buckets),
        (hooks.BATCH_SPLIT, batch_buckets),
    ):
        if isinstance(edges, str):
            off[split].append(edges)
    speculative = getattr(vllm_config, "speculative_config", None)
    positions = 0
    if speculative is None:
        for split in hooks.SPLITS:
            off[split].append("vLLM runs without --speculative-config")
    else:
        k = _speculative_tokens(speculative)
        if isinstance(k, str):
            off[hooks.TEMPERATURE_SPLIT].append(k)
        else:
            positions = k
    observability = getattr(vllm_config, "observability_config", None)
    if getattr(observability, "per_request_spec_decode_metrics", None) == "none":
        off[hooks.TEMPERATURE_SPLIT].append(
            "vLLM runs without --per-request-spec-decode-metrics summary"
        )
    if off[hooks.TEMPERATURE_SPLIT]:
        temperature_buckets = None
    if off[hooks.BATCH_SPLIT]:
        batch_buckets = None

    files, where = _probe_files(environ)
    if files is not None:  # the probe's own registry: vLLM's /metrics renders none of it
        from prometheus_client import CollectorRegistry  # noqa: PLC0415

        families = Families(CollectorRegistry(auto_describe=False), files)
    else:
        families = Families() if REGISTRY is None else Families(REGISTRY)
    state = ProbeState(
        families=families,
        model_name=_model_name(vllm_config),
        temperature_buckets=temperature_buckets,
        batch_buckets=batch_buckets,
        positions=positions,
        flush_in_hooks=not families.flush_at_scrape,
        drain_every=None if files is None else DRAIN_EVERY,
    )
    families.on_collect = state.drain
    if temperature_buckets is not None:
        try:
            _wrap_finished()
        except Exception as exc:
            off[hooks.TEMPERATURE_SPLIT].append(f"cannot wrap the hook ({type(exc).__name__})")
            state.temperature_buckets = temperature_buckets = None
    # The first rows are the check that the rows reach prometheus_client's values (TypeError:
    # its internals differ): made in vLLM's registry, since under PROMETHEUS_MULTIPROC_DIR any
    # value made, in any registry, is a series in this process's file.
    if temperature_buckets is not None:
        try:
            for label in temperature_buckets.labels:
                state.sequence_rows[label] = families.sequence_row(
                    state.model_name, label, positions
                )
        except TypeError as exc:
            off[hooks.TEMPERATURE_SPLIT].append(f"prometheus_client's internals differ ({exc})")
            state.temperature_buckets = temperature_buckets = None
    if batch_buckets is not None:
        try:
            _precreate_batch(state, engine_index)
        except TypeError as exc:
            off[hooks.BATCH_SPLIT].append(f"prometheus_client's internals differ ({exc})")
            state.batch_buckets = batch_buckets = None

    reason = families.set_info(__version__, _vllm_version(), off)
    config = _export_speculative_config(families, vllm_config)
    buckets = {hooks.TEMPERATURE_SPLIT: temperature_buckets, hooks.BATCH_SPLIT: batch_buckets}
    splits = ", ".join(
        f"{split} split off: {', '.join(off[split])}"
        if off[split]
        else f"{split} split on (buckets {','.join(buckets[split].labels)})"
        for split in hooks.SPLITS
    )
    LOG.log(
        logging.WARNING if reason else logging.INFO,
        "specdec probe %s in vLLM %s: %s; series %s; vLLM's speculative config: %s",
        __version__,
        _vllm_version(),
        splits,
        where,
        config,
    )
    return state


def _probe_files(environ: Mapping[str, str]) -> tuple[ProbeFiles | None, str]:
    """The probe's own files when ``SPECDEC_PROBE_DIR`` names a directory they can be made
    in, and where the series go, for the start-up line. A directory that cannot take them
    leaves the series on vLLM's /metrics (said in that line): the figures are never lost."""
    folder = environ.get(PROBE_DIR_ENV, "")
    if not folder:
        return None, "on vLLM's /metrics"
    shared = environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    try:
        if shared and os.path.samefile(folder, shared):
            return None, f"on vLLM's /metrics ({PROBE_DIR_ENV} is PROMETHEUS_MULTIPROC_DIR)"
        files = ProbeFiles(folder)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return None, f"on vLLM's /metrics ({PROBE_DIR_ENV}={folder!r}: {why})"
    removed = (
        f", {files.removed} dead file(s) of earlier processes removed" if files.removed else ""
    )
    return files, f"in {folder}{removed} (not on vLLM's /metrics)"


def _export_speculative_config(families: Families, vllm_config: Any) -> str:
    """Set the speculative-config info series from vLLM's config; its description for the
    start-up line. Never raises: a config the probe cannot export is said in that line."""
    try:
        config = EngineSpeculativeConfig.from_vllm_config(vllm_config)
        families.set_speculative_config(config)
        return config.describe()
    except Exception as exc:
        return f"not exported ({type(exc).__name__})"


def _edges(
    environ: Mapping[str, str],
    variable: str,
    default: tuple[float, ...] | tuple[int, ...],
    make: Callable[[tuple[float, ...]], Any],
) -> Any:
    """The buckets made from ``variable`` (unset or empty: ``default``, as for the sidecar), or
    what is wrong (str): any failure switches off that split only."""
    text = environ.get(variable, "")
    try:
        return make(parse_edges(text, default))
    except Exception as exc:  # ValueError, OverflowError, ...: this split off, never the probe
        shown = text if len(text) <= 60 else f"{text[:60]}..."
        return f"invalid {variable}={shown!r} ({type(exc).__name__}: {exc})"[:200]


def _speculative_tokens(speculative: Any) -> int | str:
    """vLLM's configured k (``speculative_config.num_speculative_tokens``), read defensively: a
    whole number from 1 to ``names.MAX_POSITIONS``, else what is wrong (str; the temperature
    split needs k to bound its per-position series)."""
    try:
        k = getattr(speculative, "num_speculative_tokens", None)
    except Exception as exc:  # a property of a vLLM the probe does not know
        k = f"<{type(exc).__name__}>"
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= names.MAX_POSITIONS:
        shown = repr(k)[:40]
        return (
            f"cannot read k from vLLM's speculative config (num_speculative_tokens={shown}; "
            f"expected 1 to {names.MAX_POSITIONS})"
        )
    return k


def _precreate_batch(state: ProbeState, engine_index: int) -> None:
    if state.batch_buckets is not None:
        for label in state.batch_buckets.labels:
            state.families.step_row(state.model_name, str(engine_index), label)


def _wrap_finished() -> None:
    """Wrap ``OutputProcessor._update_stats_from_finished`` once per process (idempotent).

    vLLM's method runs first and unchanged; the probe then reads the same request state.
    """
    module = sys.modules.get(hooks.OUTPUT_PROCESSOR_MODULE)
    if module is None:
        import importlib  # noqa: PLC0415

        module = importlib.import_module(hooks.OUTPUT_PROCESSOR_MODULE)
    cls = getattr(module, hooks.OUTPUT_PROCESSOR_CLASS)
    original = getattr(cls, hooks.FINISHED_METHOD)
    if getattr(original, WRAPPED_MARK, False):
        return

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        current = _STATE
        if current is not None:
            current.observe_finished(args, kwargs)
        return result

    setattr(wrapper, WRAPPED_MARK, True)
    setattr(cls, hooks.FINISHED_METHOD, wrapper)


def _model_name(vllm_config: Any) -> str:
    """vLLM's own ``model_name`` label: ``model_config.served_model_name`` (the first one)."""
    name = vllm_config.model_config.served_model_name
    if isinstance(name, list | tuple):
        name = name[0]
    return str(name)


def _vllm_version() -> str:
    version = getattr(sys.modules.get("vllm"), "__version__", None)
    return str(version) if version else "unknown"

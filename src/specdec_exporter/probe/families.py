"""The probe's metric families on vLLM's /metrics: created once per process, series made up front.

``prometheus_client`` objects in its default registry, which vLLM's /metrics serves; under
``PROMETHEUS_MULTIPROC_DIR`` (``--api-server-count`` > 1) each API-server process writes its own
files and vLLM's multiprocess collector sums them. Every series of a model is created at 0 when the
model is first seen (a fixed number per model, see docs/probe.md), so a scrape shows the whole set
before the first request and a rate over a fresh series starts from 0.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.registry import REGISTRY

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.histogram_bounds import ACCEPTANCE_RATE_BOUNDS, TPOT_BOUNDS, TTFT_BOUNDS
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.probe import hooks
from specdec_exporter.probe.files import ProbeFiles, file_backed

ERROR_LOG_INTERVAL = 600
"""Seconds between two log lines for one hook's errors (the counter has every one)."""

TEMPERATURE_LABELS = (names.MODEL, names.TEMPERATURE_BUCKET)
BATCH_LABELS = (names.MODEL, names.ENGINE, names.BATCH_BUCKET)

HELP = {
    names.SEQUENCES: (
        "Finished sequences, per sampled sequence: a request with n = 2 is two, each prompt of "
        "a prompt list is one."
    ),
    names.SPEC_SEQUENCES: (
        "Finished sequences that carried vLLM's per-sequence speculative figures "
        "(--per-request-spec-decode-metrics)."
    ),
    names.DRAFTS: "Verify steps with draft tokens of finished sequences (vLLM's num_drafts).",
    names.DRAFT_TOKENS: "Draft tokens proposed for finished sequences (vLLM's num_draft_tokens).",
    names.ACCEPTED_TOKENS: (
        "Draft tokens accepted for finished sequences (vLLM's num_accepted_tokens)."
    ),
    names.ACCEPTED_PER_POSITION: (
        "Draft tokens accepted at each position for finished sequences "
        "(vLLM's num_accepted_tokens_per_pos)."
    ),
    names.ACCEPTANCE_RATE: (
        "Draft acceptance rate (accepted / draft tokens) of each finished sequence that drafted."
    ),
    names.TTFT: (
        "Time to first token of each finished sequence, the value vLLM observes into "
        "vllm:time_to_first_token_seconds."
    ),
    names.TPOT: (
        "Mean time per output token of each finished sequence, the value vLLM observes into "
        "vllm:request_time_per_output_token_seconds."
    ),
    names.BATCH_STEPS: (
        "Engine steps with draft tokens, by the number of running requests vLLM reported "
        "with the step."
    ),
    names.BATCH_DRAFTS: "vLLM's num_drafts of engine steps, by running-batch bucket.",
    names.BATCH_DRAFT_TOKENS: "vLLM's num_draft_tokens of engine steps, by running-batch bucket.",
    names.BATCH_ACCEPTED_TOKENS: (
        "vLLM's num_accepted_tokens of engine steps, by running-batch bucket."
    ),
    names.INFO: (
        "The engine probe in this vLLM: its version, vLLM's, which splits are on, "
        "and why one is off."
    ),
    names.ERRORS: "Errors caught inside the probe's hooks (counted, never raised into vLLM).",
    names.SPECULATIVE_CONFIG_INFO: (
        "vLLM's own speculative configuration as the engine probe read it at start "
        "(speculative off: no --speculative-config; a field this vLLM does not have is empty)."
    ),
}


@dataclass(frozen=True, slots=True)
class TemperatureSeries:
    """The children of one (model, temperature bucket), bound once so a sequence costs no lookup."""

    sequences: Counter
    spec_sequences: Counter
    drafts: Counter
    draft_tokens: Counter
    accepted_tokens: Counter
    accepted_per_position: tuple[Counter, ...]
    acceptance_rate: Histogram
    ttft: Histogram
    tpot: Histogram


class ProbeCounter(Counter):
    """A ``Counter`` whose series have no ``_created`` sample: ~20% of the probe's lines, read by
    nobody, rendered at every scrape (multiprocess mode has none either)."""

    def _child_samples(self) -> Iterable[Any]:
        return tuple(sample for sample in super()._child_samples() if sample[0] != "_created")


class ProbeHistogram(Histogram):
    """A ``Histogram`` without ``_created`` samples, as ``ProbeCounter``."""

    def _child_samples(self) -> Iterable[Any]:
        return tuple(sample for sample in super()._child_samples() if sample[0] != "_created")


DOUBLE = 8
"""Bytes of a value in prometheus_client's files (a double, 8-aligned, then its timestamp)."""


Doubles = Any
"""A ``memoryview`` of a file as doubles (``_doubles``) or an ``array("d")``: ``cells[i] += x``
on either (typeshed's ``memoryview`` takes no float item)."""

FORKS = [0]
"""Forks of this process so far, as seen in the child (``os.register_at_fork``): a row's direct
writes belong to the process that bound them (``Families.forked``)."""


def _count_fork() -> None:
    FORKS[0] += 1


os.register_at_fork(after_in_child=_count_fork)

_MAPS: dict[tuple[int, int], tuple[Any, mmap.mmap, Doubles]] = {}
"""(id of a prometheus_client ``MmapedDict``, its size) -> the dict, the probe's own mapping of
its file and that mapping as doubles (``_doubles``): a few per process (two files, each
remapped by prometheus_client only when it doubles)."""


def _doubles(file: Any) -> Doubles | None:
    """The probe's own shared mapping of ``file``'s whole file, as doubles (None: not a
    prometheus_client ``MmapedDict`` as expected). Its own, not ``file._m``: a buffer held on
    prometheus_client's map would make its ``close`` (after a fork, at
    ``close_all_multiprocess_files``) raise. Both map the same file ``MAP_SHARED``, so a double
    written here is in the file, where vLLM's multiprocess collector reads it; a value's
    position never moves (prometheus_client's file only grows)."""
    m = getattr(file, "_m", None)
    f = getattr(file, "_f", None)
    if m is None or f is None:
        return None
    size = len(m)
    known = _MAPS.get((id(file), size))
    if known is not None and known[0] is file:
        return known[2]
    if size % DOUBLE or size <= 0:
        return None
    own = mmap.mmap(f.fileno(), size)
    view = memoryview(own).cast("d")
    _MAPS[(id(file), size)] = (file, own, view)
    return view


class DirectCells:
    """Under ``PROMETHEUS_MULTIPROC_DIR``: a row's values in one of the process's files
    (prometheus_client's ``MmapedDict``), each written as one aligned 8-byte store of its new
    total through the probe's own mapping of the file (``_doubles``; a reader in another process
    sees the old total or the new, never half of one), without ``MmapedValue.inc``'s global lock,
    pid check (a system call), key lookup, pack and slice at every write. Only the probe writes
    these values (their timestamps stay 0, as ``inc`` writes them), so each write adds to what
    the file holds; the values' own ``_value`` stays at what it was when bound, and nothing reads
    it (vLLM's /metrics reads the files)."""

    __slots__ = ("at", "view")

    def __init__(self, view: Doubles, at: Sequence[int]) -> None:
        self.view = view
        self.at = list(at)
        """Each value's index in ``view`` (its position in the file / 8)."""

    def add(self, amounts: Iterable[tuple[int, float]]) -> None:
        """(index, amount) pairs: each non-zero amount added to its value."""
        view, at = self.view, self.at
        for index, amount in amounts:
            if amount:
                cell = at[index]
                view[cell] += amount

    @classmethod
    def of(cls, values: Sequence[Any]) -> DirectCells | None:
        """The values' cells, or None when they are not all ``MmapedValue``s of one file as
        expected, each 8-aligned and holding its ``_value`` (``IncCells`` then)."""
        file: Any = getattr(values[0], "_file", None) if values else None
        positions = getattr(file, "_positions", None)
        if not isinstance(positions, dict):
            return None
        view = _doubles(file)
        if view is None:
            return None
        at: list[int] = []
        for value in values:
            position = positions.get(getattr(value, "_key", None))
            if not (
                getattr(value, "_multiprocess", False)
                and getattr(value, "_file", None) is file
                and isinstance(position, int)
                and position % DOUBLE == 0
                and 0 <= position // DOUBLE < len(view)
                and view[position // DOUBLE] == getattr(value, "_value", None)
            ):
                return None
            at.append(position // DOUBLE)
        return cls(view, at)


class IncCells:
    """A row's values through their own ``inc`` (a lock; under ``PROMETHEUS_MULTIPROC_DIR``
    ``MmapedValue.inc``, a write to the process's file), which ``Counter.inc`` and
    ``Histogram.observe`` call after their checks (the probe's amounts are checked already)."""

    __slots__ = ("_incs",)

    def __init__(self, values: Sequence[Any]) -> None:
        incs = tuple(getattr(value, "inc", None) for value in values)
        if not all(callable(inc) for inc in incs):
            raise TypeError("a value without inc")
        self._incs: tuple[Callable[[float], None], ...] = incs  # type: ignore[assignment]

    def add(self, amounts: Iterable[tuple[int, float]]) -> None:
        incs = self._incs
        for index, amount in amounts:
            if amount:
                incs[index](amount)


Cells = DirectCells | IncCells


def _cells(values: Sequence[Any], direct: bool) -> Cells:
    """The values' cells (``direct``: ``DirectCells`` where they can). TypeError when
    prometheus_client's internals differ (the probe's start-up switches the split off then: its
    first rows are the check, ``plugin._start``)."""
    if any(value is None for value in values):
        raise TypeError("a child without its values")
    return (direct and DirectCells.of(values)) or IncCells(values)


def _counter_values(children: Iterable[Counter]) -> list[Any]:
    """The counter children's values (what ``Counter.inc`` adds to)."""
    values = []
    for child in children:
        if not isinstance(child, ProbeCounter):
            raise TypeError("a Counter child without _value.inc")
        values.append(getattr(child, "_value", None))
    return values


def _histogram_values(child: Histogram, bounds: Sequence[float]) -> tuple[list[Any], Any]:
    """The child's bucket values and its sum's: what ``Histogram.observe`` adds to (1 to the
    first bucket whose bound is >= the amount, the amount to the sum). TypeError when
    prometheus_client's internals differ."""
    upper = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    if not (
        isinstance(child, ProbeHistogram)
        and upper == [*bounds, math.inf]
        and isinstance(buckets, list)
        and len(buckets) == len(upper)
    ):
        raise TypeError("a Histogram child without _upper_bounds, _buckets and _sum")
    return buckets, getattr(child, "_sum", None)


RATE_UPPER = [*ACCEPTANCE_RATE_BOUNDS, math.inf]
TTFT_UPPER = [*TTFT_BOUNDS, math.inf]
TPOT_UPPER = [*TPOT_BOUNDS, math.inf]


TTFT_AT = len(RATE_UPPER)
"""``SequenceRow.cells``: the acceptance rate's buckets first, then TTFT's, then TPOT's, then
the three sums (``SUMS_AT``)."""
TPOT_AT = TTFT_AT + len(TTFT_UPPER)
SUMS_AT = TPOT_AT + len(TPOT_UPPER)


class SequenceRow:
    """One temperature series' cells: what a finished sequence adds (``count``).

    Under ``PROMETHEUS_MULTIPROC_DIR`` (``DirectCells`` for both files) ``count`` writes each
    amount straight into the process's files, called from the finished-request hook
    (``plugin.ProbeState.observe_finished``): that code runs cold, between pieces of vLLM's
    work, where every Python call and every object it reads is a cache miss, so a sequence is
    one call that adds to the values where they are, no second pass. Otherwise (one API server)
    ``count`` adds to two arrays of plain doubles here, the same code on other cells: no
    prometheus_client call and none of its locks on vLLM's output path; ``flush`` moves the
    amounts into the children, whole, and the row puts itself in ``Families.dirty`` with its
    first amount since a flush. The caller holds ``Families.pending_lock`` for both.

    A histogram's amounts are per bucket (``bisect_left`` finds the bucket ``Histogram.observe``
    would) and a sum, so ``_sum`` may differ from one-by-one observes in the last bits of a
    float, never in a count."""

    __slots__ = (
        "_counter_at",
        "_counters",
        "_dirty",
        "_histogram_at",
        "_histograms",
        "_series",
        "_sinks",
        "_waiting",
    )

    _counters: Doubles
    _histograms: Doubles
    _counter_at: list[int]
    _histogram_at: list[int]
    _sinks: tuple[Cells, Cells] | None

    HOOK = names.HOOK_FINISHED
    """The hook whose amounts a row carries: a failed flush is its error."""
    POSITIONS_AT = 5
    """The counters: sequences, spec sequences, drafts, draft tokens, accepted tokens, then one
    per position (``counting.sequence_figures``' amounts from index 2)."""

    def __init__(
        self, series: TemperatureSeries, direct: bool = False, dirty: list[Any] | None = None
    ) -> None:
        self._series = series
        self._dirty = [] if dirty is None else dirty
        """Where the row puts itself when it gets its first amount (``Families.flush_locked``
        flushes those); never, when it writes the files."""
        self.bind(direct)

    def bind(self, direct: bool) -> None:
        """Reach the children's values (``direct``: ``DirectCells`` where they can; the row
        writes them in ``count`` when both files can, else adds here until ``flush``)."""
        series = self._series
        counters = _cells(
            _counter_values(
                (
                    series.sequences,
                    series.spec_sequences,
                    series.drafts,
                    series.draft_tokens,
                    series.accepted_tokens,
                    *series.accepted_per_position,
                )
            ),
            direct,
        )
        values: list[Any] = []
        sums: list[Any] = []
        for child, bounds in (
            (series.acceptance_rate, ACCEPTANCE_RATE_BOUNDS),
            (series.ttft, TTFT_BOUNDS),
            (series.tpot, TPOT_BOUNDS),
        ):
            buckets, sum_value = _histogram_values(child, bounds)
            values.extend(buckets)
            sums.append(sum_value)
        histograms = _cells([*values, *sums], direct)
        if type(counters) is DirectCells and type(histograms) is DirectCells:
            self._counters, self._counter_at = counters.view, counters.at
            self._histograms, self._histogram_at = histograms.view, histograms.at
            self._sinks = None
            self._waiting = False
        else:
            self._sinks = (counters, histograms)
            self._counters = array(
                "d", bytes(DOUBLE * (self.POSITIONS_AT + len(series.accepted_per_position)))
            )
            self._counter_at = list(range(len(self._counters)))
            self._histograms = array("d", bytes(DOUBLE * (SUMS_AT + 3)))
            self._histogram_at = list(range(len(self._histograms)))
            self._waiting = True

    @property
    def positions(self) -> int:
        """The per-position counters the row has."""
        return len(self._counter_at) - self.POSITIONS_AT

    def count(
        self,
        figures: Sequence[int] | None,
        rate: float | None = None,
        timing: tuple[float, float] | None = None,
    ) -> None:
        """One finished sequence, checked by its caller (finite amounts): its count, its
        speculative amounts and acceptance rate (``counting.sequence_figures``; None: vLLM gave
        none) and its (TTFT, TPOT) in seconds (None: no timing)."""
        if self._waiting:  # adding here: the row's first amount since a flush
            self._waiting = False
            self._dirty.append(self)
        cells, at = self._counters, self._counter_at
        cell = at[0]
        cells[cell] += 1
        if figures is not None:
            cell = at[1]
            cells[cell] += 1
            index = 2
            for amount in figures:
                if amount:
                    cell = at[index]
                    cells[cell] += amount
                index += 1
        cells, at = self._histograms, self._histogram_at
        if rate is not None:
            cell = at[bisect_left(RATE_UPPER, rate)]
            cells[cell] += 1
            cell = at[SUMS_AT]
            cells[cell] += rate
        if timing is not None:
            ttft, tpot = timing
            cell = at[TTFT_AT + bisect_left(TTFT_UPPER, ttft)]
            cells[cell] += 1
            cell = at[TPOT_AT + bisect_left(TPOT_UPPER, tpot)]
            cells[cell] += 1
            cell = at[SUMS_AT + 1]
            cells[cell] += ttft
            cell = at[SUMS_AT + 2]
            cells[cell] += tpot

    def flush(self) -> None:
        """Add the amounts held here to the children and start again from 0 (nothing to do
        when the row writes the files in ``count``)."""
        sinks = self._sinks
        if sinks is None or self._waiting:
            return
        counters, histograms = self._counters, self._histograms
        self._counters = array("d", bytes(DOUBLE * len(counters)))
        self._histograms = array("d", bytes(DOUBLE * len(histograms)))
        self._waiting = True
        sinks[0].add(enumerate(counters))
        sinks[1].add(enumerate(histograms))


@dataclass(frozen=True, slots=True)
class BatchSeries:
    steps: Counter
    drafts: Counter
    draft_tokens: Counter
    accepted_tokens: Counter


class StepRow:
    """One batch series' amounts not yet in its counters (steps, drafts, draft tokens,
    accepted tokens): a step adds four ints to ``pending`` instead of four counter updates, and
    the row to ``dirty`` with its first; ``flush`` moves them in (the caller holds
    ``Families.pending_lock`` for both)."""

    __slots__ = ("_cells", "_series", "dirty", "pending")

    HOOK = names.HOOK_RECORD

    def __init__(
        self, series: BatchSeries, direct: bool = False, dirty: list[Any] | None = None
    ) -> None:
        self._series = series
        self.bind(direct)
        self.pending = [0, 0, 0, 0]
        self.dirty = [] if dirty is None else dirty
        """As ``SequenceRow._dirty``: whoever adds a row's first step appends it."""

    def bind(self, direct: bool) -> None:
        """As ``SequenceRow.bind``."""
        series = self._series
        self._cells = _cells(
            _counter_values(
                (series.steps, series.drafts, series.draft_tokens, series.accepted_tokens)
            ),
            direct,
        )

    def flush(self) -> None:
        pending = self.pending
        if pending[0]:  # every step adds 1 to its steps
            self.pending = [0, 0, 0, 0]
            self._cells.add(enumerate(pending))


class Families:
    """Every family of the probe, registered once in ``registry``; with ``files``, every value
    in the probe's own files (``probe/files.py``: vLLM's /metrics renders none of them, so
    ``registry`` is one of the probe's own, never vLLM's)."""

    def __init__(
        self, registry: CollectorRegistry = REGISTRY, files: ProbeFiles | None = None
    ) -> None:
        counter_class = ProbeCounter if files is None else file_backed(ProbeCounter, files)
        histogram_class = ProbeHistogram if files is None else file_backed(ProbeHistogram, files)
        gauge_class = Gauge if files is None else file_backed(Gauge, files)

        def counter(name: str, labels: Sequence[str]) -> Counter:
            return counter_class(name, HELP[name], labelnames=labels, registry=registry)

        def histogram(name: str, bounds: Sequence[float]) -> Histogram:
            return histogram_class(
                name, HELP[name], labelnames=TEMPERATURE_LABELS, buckets=bounds, registry=registry
            )

        self.sequences = counter(names.SEQUENCES, TEMPERATURE_LABELS)
        self.spec_sequences = counter(names.SPEC_SEQUENCES, TEMPERATURE_LABELS)
        self.drafts = counter(names.DRAFTS, TEMPERATURE_LABELS)
        self.draft_tokens = counter(names.DRAFT_TOKENS, TEMPERATURE_LABELS)
        self.accepted_tokens = counter(names.ACCEPTED_TOKENS, TEMPERATURE_LABELS)
        self.accepted_per_position = counter(
            names.ACCEPTED_PER_POSITION, (*TEMPERATURE_LABELS, names.POSITION)
        )
        self.acceptance_rate = histogram(names.ACCEPTANCE_RATE, ACCEPTANCE_RATE_BOUNDS)
        self.ttft = histogram(names.TTFT, TTFT_BOUNDS)
        self.tpot = histogram(names.TPOT, TPOT_BOUNDS)
        self.batch_steps = counter(names.BATCH_STEPS, BATCH_LABELS)
        self.batch_drafts = counter(names.BATCH_DRAFTS, BATCH_LABELS)
        self.batch_draft_tokens = counter(names.BATCH_DRAFT_TOKENS, BATCH_LABELS)
        self.batch_accepted_tokens = counter(names.BATCH_ACCEPTED_TOKENS, BATCH_LABELS)
        self.info = gauge_class(
            names.INFO,
            HELP[names.INFO],
            labelnames=names.INFO_LABELS,
            registry=registry,
            multiprocess_mode="max",
        )
        self.errors = counter(names.ERRORS, (names.HOOK,))
        for hook in names.HOOKS:
            self.errors.labels(hook)
        self.speculative_config = _speculative_config_gauge(registry, gauge_class)
        self._temperature: dict[tuple[str, str], TemperatureSeries] = {}
        self._batch: dict[tuple[str, str, str], BatchSeries] = {}
        self._lock = threading.Lock()
        self.pending_lock = threading.Lock()
        """Held by whoever adds to the rows or flushes them: a scrape (vLLM serves /metrics from
        a worker thread) or a hook that drains (``plugin.ProbeState.drain``)."""
        self._sequence_rows: dict[tuple[str, str], SequenceRow] = {}
        self._step_rows: dict[tuple[str, str, str], StepRow] = {}
        self.on_collect: Callable[[], None] = self.flush
        """What a scrape of a probe family does first: flush the rows (the plugin's state sets
        its ``drain``, which counts what its hooks left and then flushes)."""
        self.files = files
        self.flush_at_scrape = files is None and values.ValueClass is values.MutexValue
        """True with one API server and no ``files``: a scrape of this process's registry drains
        and flushes first (every family's ``collect`` calls ``on_collect``), so /metrics is
        exact. False under ``PROMETHEUS_MULTIPROC_DIR`` or with ``files``: a reader reads the
        processes' files, never this process's ``collect``; the step hook drains instead
        (``plugin.py``)."""
        self.direct_writes = not self.flush_at_scrape
        """In files (``PROMETHEUS_MULTIPROC_DIR``'s or the probe's own) the rows write their
        values' file directly (``DirectCells``) while this process is the one that made them
        (``forks``)."""
        self.forks = FORKS[0]
        """``FORKS`` when the rows were bound: another count is a forked child (``forked``)."""
        self.dirty: list[SequenceRow | StepRow] = []
        """The rows with amounts, each once: what the next flush moves."""
        for family in (
            self.sequences,
            self.spec_sequences,
            self.drafts,
            self.draft_tokens,
            self.accepted_tokens,
            self.accepted_per_position,
            self.acceptance_rate,
            self.ttft,
            self.tpot,
            self.batch_steps,
            self.batch_drafts,
            self.batch_draft_tokens,
            self.batch_accepted_tokens,
            self.errors,
        ):
            family.collect = self._flushing(family.collect)  # type: ignore[method-assign]

    def _flushing(self, collect: Callable[[], Any]) -> Callable[[], Any]:
        def flushed_then_collected() -> Any:
            try:
                self.on_collect()
            except Exception:  # the scrape goes on with what the series hold
                self.count_error(names.HOOK_RECORD)
            return collect()

        return flushed_then_collected

    def sequence_row(self, model: str, bucket: str, positions: int) -> SequenceRow:
        """The pending amounts of (model, bucket)'s series, made with them."""
        with self.pending_lock:
            return self.sequence_row_locked(model, bucket, positions)

    def sequence_row_locked(self, model: str, bucket: str, positions: int) -> SequenceRow:
        """``sequence_row`` for a caller that holds ``pending_lock``."""
        row = self._sequence_rows.get((model, bucket))
        if row is None or row.positions < positions:
            if row is not None:
                row.flush()
            series = self.temperature_series(model, bucket, positions)
            row = SequenceRow(series, self.direct_writes, self.dirty)
            self._sequence_rows[(model, bucket)] = row
        return row

    def step_row(self, model: str, engine: str, bucket: str) -> StepRow:
        """The pending amounts of (model, engine, bucket)'s batch series, made with them."""
        with self.pending_lock:
            return self.step_row_locked(model, engine, bucket)

    def step_row_locked(self, model: str, engine: str, bucket: str) -> StepRow:
        """``step_row`` for a caller that holds ``pending_lock``."""
        row = self._step_rows.get((model, engine, bucket))
        if row is None:
            row = StepRow(self.batch_series(model, engine, bucket), self.direct_writes, self.dirty)
            self._step_rows[(model, engine, bucket)] = row
        return row

    def flush(self) -> None:
        """Every row's amounts into its children (``flush_locked`` under ``pending_lock``)."""
        with self.pending_lock:
            self.flush_locked()

    def flush_locked(self) -> None:
        """The amounts of every row that has some (``dirty``) into its children, for a caller
        that holds ``pending_lock``. Never raises: a failed flush is counted as an error of the
        hook whose amounts it carried (they stay lost, never counted twice)."""
        dirty = self.dirty
        if not dirty:
            return
        if self.direct_writes and FORKS[0] != self.forks:
            self.forked()
        for row in dirty:  # the lock held: no row is added while they are walked
            try:
                row.flush()
            except Exception:
                self.count_error(row.HOOK)
        dirty.clear()

    def forked(self) -> None:
        """In a forked child the direct writes would land in the parent's file: every row goes
        back to ``MmapedValue.inc`` (which opens this process's own file)."""
        self.direct_writes = False
        rows: list[SequenceRow | StepRow] = [*self._sequence_rows.values()]
        rows.extend(self._step_rows.values())
        for row in rows:
            row.bind(False)

    def set_info(self, version: str, vllm_version: str, off: Mapping[str, Sequence[str]]) -> str:
        """Set the info series: a split (``hooks.SPLITS``) is on unless ``off`` lists why it is
        not. Returns the reason, the whole of it (the series keeps ``names.REASON_LIMIT``
        characters)."""
        reason = "; ".join(
            f"{split} split off: {', '.join(why)}" for split, why in off.items() if why
        )
        self.info.labels(
            version,
            vllm_version,
            names.OFF if off.get(hooks.TEMPERATURE_SPLIT) else names.ON,
            names.OFF if off.get(hooks.BATCH_SPLIT) else names.ON,
            reason[: names.REASON_LIMIT],
        ).set(1)
        return reason

    def set_speculative_config(self, config: EngineSpeculativeConfig) -> None:
        """The speculative-config info series: one per process, the same in every API server."""
        self.speculative_config.labels(*config.label_values()).set(1)

    def temperature_series(self, model: str, bucket: str, positions: int) -> TemperatureSeries:
        """The series of (model, bucket), with at least ``positions`` per-position children."""
        series = self._temperature.get((model, bucket))
        if series is None or len(series.accepted_per_position) < positions:
            with self._lock:
                series = self._temperature_series(model, bucket, positions)
        return series

    def _temperature_series(self, model: str, bucket: str, positions: int) -> TemperatureSeries:
        known = self._temperature.get((model, bucket))
        if known is not None and len(known.accepted_per_position) >= positions:
            return known
        labels = (model, bucket)
        series = TemperatureSeries(
            sequences=self.sequences.labels(*labels),
            spec_sequences=self.spec_sequences.labels(*labels),
            drafts=self.drafts.labels(*labels),
            draft_tokens=self.draft_tokens.labels(*labels),
            accepted_tokens=self.accepted_tokens.labels(*labels),
            accepted_per_position=tuple(
                self.accepted_per_position.labels(*labels, str(position))
                for position in range(positions)
            ),
            acceptance_rate=self.acceptance_rate.labels(*labels),
            ttft=self.ttft.labels(*labels),
            tpot=self.tpot.labels(*labels),
        )
        self._temperature[(model, bucket)] = series
        return series

    def batch_series(self, model: str, engine: str, bucket: str) -> BatchSeries:
        series = self._batch.get((model, engine, bucket))
        if series is None:
            with self._lock:
                labels = (model, engine, bucket)
                series = BatchSeries(
                    steps=self.batch_steps.labels(*labels),
                    drafts=self.batch_drafts.labels(*labels),
                    draft_tokens=self.batch_draft_tokens.labels(*labels),
                    accepted_tokens=self.batch_accepted_tokens.labels(*labels),
                )
                self._batch[(model, engine, bucket)] = series
        return series

    def count_error(self, hook: str) -> None:
        """Never raises: the error counter is the last thing that may fail."""
        with contextlib.suppress(Exception):  # nothing left to report it to
            self.errors.labels(hook).inc()


def _speculative_config_gauge(
    registry: CollectorRegistry, gauge_class: type[Gauge] = Gauge
) -> Gauge:
    """Like the probe's info series: ``max`` over API servers keeps one series, not one per
    process."""
    return gauge_class(
        names.SPECULATIVE_CONFIG_INFO,
        HELP[names.SPECULATIVE_CONFIG_INFO],
        labelnames=names.SPECULATIVE_CONFIG_LABELS,
        registry=registry,
        multiprocess_mode="max",
    )

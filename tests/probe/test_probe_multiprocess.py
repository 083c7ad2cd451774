"""With --api-server-count 2 vLLM serves /metrics from PROMETHEUS_MULTIPROC_DIR: two API-server
processes with the probe give one info series (not one per pid) and summed counters."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

SCRIPT = textwrap.dedent(
    """
    from specdec_exporter.probe.families import Families
    families = Families()
    families.info.labels("0.1.0", "0.32.0", "on", "on", "").set(1)
    families.temperature_series("m", "0", 4).drafts.inc(3)
    families.batch_series("m", "0", "1").steps.inc()
    """
)


def test_two_api_servers_give_one_info_series_and_summed_counters(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, timeout=60)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    info = [
        sample
        for metric in registry.collect()
        if metric.name == "specdec_probe_info"
        for sample in metric.samples
    ]
    assert [(sample.labels, sample.value) for sample in info] == [
        (
            {
                "version": "0.1.0",
                "vllm_version": "0.32.0",
                "temperature_split": "on",
                "batch_split": "on",
                "reason": "",
            },
            1.0,
        )
    ]
    labels = {"model_name": "m", "temperature_bucket": "0"}
    assert registry.get_sample_value("specdec_probe_drafts_total", labels) == 6
    batch = {"model_name": "m", "engine": "0", "batch_bucket": "1"}
    assert registry.get_sample_value("specdec_probe_batch_steps_total", batch) == 2
    assert registry.get_sample_value("specdec_probe_errors_total", {"hook": "record"}) == 0


PROBE_SCRIPT = textwrap.dedent(
    """
    import os, sys, types
    sys.path.insert(0, sys.argv[1])
    import fake_vllm_modules as fake
    with fake.installed():
        from specdec_exporter.probe import plugin
        config = types.SimpleNamespace(
            model_config=types.SimpleNamespace(served_model_name=["served"]),
            speculative_config=types.SimpleNamespace(num_speculative_tokens=4),
            observability_config=types.SimpleNamespace(per_request_spec_decode_metrics="summary"),
        )
        logger = plugin.SpecdecProbeStatLogger(config, 0)
        state = logger.state
        assert state.flush_in_hooks and state.families.direct_writes
        row = state.sequence_rows["0"]
        assert row._sinks is None, row._sinks  # count writes the files
        assert type(row._counters) is memoryview and type(row._histograms) is memoryview
        processor = sys.modules["vllm.v1.engine.output_processor"].OutputProcessor()
        metrics = fake.RequestSpecDecodeMetrics(4, [1, 1, 0, 0, 2], 12)
        request = fake.RequestState("r", "p", 0.0, metrics, None)
        step = fake.SpecDecodingStats(4, num_drafts=1, num_draft_tokens=4, num_accepted_tokens=3)
        finishing = types.SimpleNamespace(finished_requests=["done"])
        for held in (False, True):  # no event loop here: each finishing step drains at once
            if held:  # a drain holds the lock: the sequence waits for the next drain
                state.families.pending_lock.acquire()
            processor._update_stats_from_finished(request, 1, None)
            assert len(state.finished) == held, state.finished  # else counted at its finish
            if held:
                state.families.pending_lock.release()
            logger.record(fake.SchedulerStats(1, spec_decoding_stats=step), finishing)
            assert not state.finished
        child = os.fork()
        if child == 0:  # the direct writes would land in the parent's file: not any more
            processor._update_stats_from_finished(request, 1, None)
            logger.record(fake.SchedulerStats(1, spec_decoding_stats=step), finishing)
            os._exit(0 if not state.families.direct_writes else 3)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print(os.getpid(), child)
    """
)


def test_the_probe_writes_its_file_directly_and_only_its_own_series(tmp_path: Path) -> None:
    """Under PROMETHEUS_MULTIPROC_DIR the rows write the process's file without
    MmapedValue.inc's lock and pid check: the same values in the same file; a finished sequence
    is counted in its hook (in the inbox, for the next drain, while a drain holds the lock, so
    the hook never waits); a forked child
    writes its own file (the rows go back to MmapedValue.inc); and start-up leaves no series
    but the model's (no check values in the file)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE_SCRIPT, str(Path(__file__).parent)],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    parent, child = done.stdout.split()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    samples = [sample for metric in registry.collect() for sample in metric.samples]
    models = {sample.labels.get("model_name") for sample in samples} - {None}
    assert models == {"served"}
    labels = {"model_name": "served", "temperature_bucket": "0"}
    assert registry.get_sample_value("specdec_probe_drafts_total", labels) == 12
    assert registry.get_sample_value("specdec_probe_accepted_tokens_total", labels) == 27
    assert registry.get_sample_value("specdec_probe_acceptance_rate_count", labels) == 3
    assert registry.get_sample_value("specdec_probe_acceptance_rate_sum", labels) == 3 * 0.75
    batch = {"model_name": "served", "engine": "0", "batch_bucket": "1"}
    assert registry.get_sample_value("specdec_probe_batch_steps_total", batch) == 3

    def drafts_in(pid: str) -> float:
        """The drafts in one process's file alone."""
        (tmp_path / "only").mkdir(exist_ok=True)
        for old in (tmp_path / "only").iterdir():
            old.unlink()
        (tmp_path / "only" / f"counter_{pid}.db").write_bytes(
            (tmp_path / f"counter_{pid}.db").read_bytes()
        )
        alone = CollectorRegistry()
        MultiProcessCollector(alone, path=str(tmp_path / "only"))
        return alone.get_sample_value("specdec_probe_drafts_total", labels) or 0.0

    assert (drafts_in(parent), drafts_in(child)) == (8, 4)


def test_direct_cells_write_where_mmapeddict_would_and_leave_its_map_alone(
    tmp_path: Path,
) -> None:
    """``families.DirectCells`` adds each amount to its value's double in the file (the
    position prometheus_client's ``MmapedDict`` keeps for the key), nothing else, and skips an
    amount of 0, through the probe's own mapping: prometheus_client still closes its map (a
    buffer held on it would make ``close`` raise), and a value written after prometheus_client
    remapped the grown file is in the file. Values that are not ``MmapedValue``s of one file as
    expected, or whose file does not hold their ``_value``, get none (``IncCells`` then)."""
    from types import SimpleNamespace  # noqa: PLC0415

    from prometheus_client.mmap_dict import MmapedDict  # noqa: PLC0415

    from specdec_exporter.probe.families import DirectCells  # noqa: PLC0415

    path = str(tmp_path / "counter_1.db")
    file = MmapedDict(path)
    file.write_value("a", 1.0, 0.0)
    file.write_value("b", 0.0, 0.0)
    file.write_value("c", 7.0, 0.0)
    a = SimpleNamespace(_multiprocess=True, _value=1.0, _file=file, _key="a")
    b = SimpleNamespace(_multiprocess=True, _value=0.0, _file=file, _key="b")
    cells = DirectCells.of([a, b])
    assert cells is not None
    cells.add([(0, 2), (1, 0)])
    cells.add(enumerate([0.5, 0.25]))

    def stored() -> dict[str, tuple[float, float]]:
        return {
            key: (value, timestamp)
            for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(path)
        }

    assert stored() == {"a": (3.5, 0.0), "b": (0.25, 0.0), "c": (7.0, 0.0)}
    for index in range(3000):  # past 64 KiB: prometheus_client maps the grown file anew
        file.write_value(f"grown {index:04d}", 0.0, 0.0)
    cells.add([(0, 1)])
    assert stored()["a"] == (4.5, 0.0) and len(stored()) == 3003
    assert DirectCells.of([a, SimpleNamespace(_value=1.0, _file=file, _key="b")]) is None
    assert DirectCells.of([a, SimpleNamespace(**vars(b) | {"_key": "other"})]) is None
    assert DirectCells.of([a, SimpleNamespace(**vars(b) | {"_value": 1.0})]) is None
    other = MmapedDict(str(tmp_path / "counter_2.db"))
    other.write_value("b", 0.0, 0.0)
    assert DirectCells.of([a, SimpleNamespace(**vars(b) | {"_file": other})]) is None
    assert DirectCells.of([SimpleNamespace(_file=SimpleNamespace(_positions={}))]) is None
    file.close()  # prometheus_client's own close, as after a fork: no BufferError
    other.close()


ROWS_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import row_pairs
    from specdec_exporter.probe.families import Families

    families = Families()
    row = families.sequence_row("direct", "b", 2)
    assert row._sinks is None  # count writes the file
    row_pairs.count_both(row, families.temperature_series("inc", "b", 2), row_pairs.AMOUNTS)
    """
)


def test_direct_rows_write_what_prometheus_clients_own_updates_write(tmp_path: Path) -> None:
    """Under PROMETHEUS_MULTIPROC_DIR a row's ``count`` (each amount added to its double in the
    file) leaves every series as ``inc`` and ``observe`` one by one leave another model's: at each
    bucket bound, between, below and above, and a sequence without figures or timing."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run(
        [sys.executable, "-c", ROWS_SCRIPT, str(Path(__file__).parent)],
        env=env,
        check=True,
        timeout=60,
    )
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    by_model: dict[str, dict[tuple[str, str | None, str | None], float]] = {}
    for metric in registry.collect():
        for sample in metric.samples:
            model = sample.labels.get("model_name")
            if model in ("direct", "inc"):
                key = (sample.name, sample.labels.get("le"), sample.labels.get("position"))
                by_model.setdefault(model, {})[key] = sample.value
    assert by_model["direct"].keys() == by_model["inc"].keys()
    assert len(by_model["direct"]) > 40
    for key, value in by_model["inc"].items():
        assert by_model["direct"][key] == value, key

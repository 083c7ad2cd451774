"""The probe's own files (SPECDEC_PROBE_DIR): what the sidecar reads from them is what vLLM's
/metrics would have shown, vLLM's registry and PROMETHEUS_MULTIPROC_DIR get none of it, a dead
writer's files are neither read nor kept, and nothing that is not ours is ever deleted."""

from __future__ import annotations

import fcntl
import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fake_vllm_modules as fake
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from specdec_exporter.core import probe_files as naming
from specdec_exporter.core import probe_names as names
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig
from specdec_exporter.probe.counting import sequence_figures
from specdec_exporter.probe.families import Families
from specdec_exporter.probe.files import ProbeFiles, read, remove_dead, writer_alive

CAP = 1 << 24


@pytest.fixture(autouse=True)
def closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``ProbeFiles`` a test makes is closed after it (vLLM's process never closes its)."""
    made: list[ProbeFiles] = []
    original = ProbeFiles.__init__

    def init(self: ProbeFiles, folder: str) -> None:
        original(self, folder)
        made.append(self)

    monkeypatch.setattr(ProbeFiles, "__init__", init)
    yield
    for files in made:
        if files._pid == os.getpid():
            files.close()


def feed(families: Families) -> None:
    """The same amounts into any ``Families``: sequences in two buckets, steps, an error."""
    for bucket, histogram, draft_tokens, timing in (
        ("0", [1, 2, 0, 3, 1], 20, (0.3, 0.02)),
        ("0", [0, 0, 0, 0, 4], 16, (0.001, 0.5)),
        ("0.7-1.0", [5, 1, 0, 0, 0], 24, (12.0, 0.07)),
    ):
        row = families.sequence_row("m", bucket, 4)
        figures, rate = sequence_figures(histogram, draft_tokens, 4)
        row.count(figures, rate, timing)
        row.count(None)  # a sequence without figures or timing
    steps = families.step_row("m", "0", "3-4")
    steps.pending = [2, 3, 12, 7]
    families.dirty.append(steps)
    families.flush()
    families.count_error(names.HOOK_RECORD)
    families.set_info("0.1.0", "0.32.0", {})
    families.set_speculative_config(
        EngineSpeculativeConfig(True, method="draft_model", num_speculative_tokens="4")
    )


def samples(text: bytes | str) -> list[str]:
    """The sample lines of a text, sorted (a registry and a merge order families apart)."""
    if isinstance(text, bytes):
        text = text.decode()
    return sorted(line for line in text.splitlines() if line and not line.startswith("#"))


def test_the_files_read_back_as_what_the_registry_renders(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    feed(Families(registry))
    feed(Families(CollectorRegistry(), ProbeFiles(str(tmp_path))))
    assert sorted(os.listdir(tmp_path)) == sorted(
        name for name in os.listdir(tmp_path) if naming.is_ours(name)
    )
    assert len(os.listdir(tmp_path)) == len(naming.KINDS)
    got = read(str(tmp_path), CAP)
    assert got is not None
    assert samples(got) == samples(generate_latest(registry))
    assert 'specdec_probe_accepted_tokens_total{model_name="m",temperature_bucket="0"} 31.0' in (
        samples(got)
    )


def test_an_empty_or_missing_folder(tmp_path: Path) -> None:
    assert read(str(tmp_path), CAP) is None
    (tmp_path / "counter_1.db").write_bytes(b"not ours")  # prometheus_client's name: not read
    assert read(str(tmp_path), CAP) is None
    with pytest.raises(FileNotFoundError):
        read(str(tmp_path / "gone"), CAP)
    with pytest.raises(OSError):
        ProbeFiles(str(tmp_path / "gone"))


WRITER = textwrap.dedent(
    """
    import sys, time
    from prometheus_client import CollectorRegistry
    from specdec_exporter.probe.families import Families
    from specdec_exporter.probe.files import ProbeFiles
    families = Families(CollectorRegistry(), ProbeFiles(sys.argv[1]))
    families.temperature_series("m", "0", 4).drafts.inc(3)
    families.batch_series("m", "0", "1").steps.inc()
    families.set_info("0.1.0", "0.32.0", {})
    print("written", flush=True)
    if sys.argv[2] == "stay":
        time.sleep(120)
    """
)


def writer(folder: Path, stay: bool) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder), "stay" if stay else "go"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "written\n"
    process.stdout.close()
    return process


def test_live_writers_are_summed_a_dead_ones_files_are_not_read(tmp_path: Path) -> None:
    dead = writer(tmp_path, stay=False)
    dead.wait(timeout=60)
    live = [writer(tmp_path, stay=True) for _ in range(2)]
    try:
        got = read(str(tmp_path), CAP)
        assert got is not None
        lines = samples(got)
        assert 'specdec_probe_drafts_total{model_name="m",temperature_bucket="0"} 6.0' in lines
        info = [line for line in lines if line.startswith(names.INFO)]
        assert len(info) == 1 and info[0].endswith(" 1.0")  # max over processes: one series
        assert len(os.listdir(tmp_path)) == 2 * len(naming.KINDS)  # the dead one's removed
    finally:
        for process in live:
            process.send_signal(signal.SIGKILL)  # however a writer ends, its lock goes with it
            process.wait(timeout=60)
    assert read(str(tmp_path), CAP) is None  # vLLM restarted: its series start from 0


def test_a_starting_probe_deletes_dead_files_of_ours_and_nothing_else(tmp_path: Path) -> None:
    live = writer(tmp_path, stay=True)
    live_names = set(os.listdir(tmp_path))
    writer(tmp_path, stay=False).wait(timeout=60)  # a live writer's files stay at its start
    dead = set(os.listdir(tmp_path)) - live_names
    assert len(dead) == len(naming.KINDS)
    others = {
        "counter_12.db": b"prometheus_client's",
        "notes.txt": b"someone's",
        naming.file_name("counter", 1, "ab" * 8) + ".bak": b"not quite ours",
    }
    for name, content in others.items():
        (tmp_path / name).write_bytes(content)
    young = tmp_path / naming.temporary_name(naming.file_name("histogram", 7, "cd" * 8))
    old = tmp_path / naming.temporary_name(naming.file_name("histogram", 8, "ef" * 8))
    young.write_bytes(b"")
    old.write_bytes(b"")
    os.utime(old, (time.time() - 2 * naming.TEMPORARY_AGE,) * 2)
    try:
        files = ProbeFiles(str(tmp_path))
        assert files.removed == len(dead) + 1  # the dead writer's three and the old temporary
        left = set(os.listdir(tmp_path))
        assert left.isdisjoint(dead) and old.name not in left
        assert set(others) | live_names | {young.name} <= left
        assert all(writer_alive(str(tmp_path / name)) for name in live_names)
    finally:
        live.kill()
        live.wait(timeout=60)
    assert remove_dead(str(tmp_path)) == len(live_names)  # this process's own files stay: held
    for name, content in others.items():
        assert (tmp_path / name).read_bytes() == content


def test_under_prometheus_multiproc_dir_vllms_files_get_none_of_the_probes(
    tmp_path: Path,
) -> None:
    """Two API servers: prometheus_client writes every value made into PROMETHEUS_MULTIPROC_DIR;
    with the probe's own folder none of the probe's series is among them."""
    shared, own = tmp_path / "vllm", tmp_path / "probe"
    shared.mkdir()
    own.mkdir()
    script = WRITER.replace('if sys.argv[2] == "stay"', "if False")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-c", script, str(own), "go"], env=env, check=True, timeout=60
        )
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(shared))  # type: ignore[no-untyped-call]
    assert [metric.name for metric in registry.collect()] == []
    assert len(os.listdir(own)) == len(naming.KINDS)  # the second removed the first's; dead too
    assert read(str(own), CAP) is None


def test_a_forked_child_writes_files_of_its_own(tmp_path: Path) -> None:
    families = Families(CollectorRegistry(), ProbeFiles(str(tmp_path)))
    row = families.sequence_row("m", "0", 4)
    row.count(None)
    families.count_error(names.HOOK_RECORD)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: count through the fork path, then stay alive until told
        try:
            families.flush()  # notices the fork: the rows go back to FileValue.inc
            families.sequence_row("m", "0", 4).count(None)
            families.flush()
            families.count_error(names.HOOK_RECORD)
            os.write(ready_w, b"x")
            time.sleep(60)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"x"
        got = read(str(tmp_path), CAP)
        assert got is not None
        lines = samples(got)
        assert 'specdec_probe_sequences_total{model_name="m",temperature_bucket="0"} 2.0' in lines
        assert 'specdec_probe_errors_total{hook="record"} 2.0' in lines
        writers = {naming.NAME.fullmatch(name)[2] for name in os.listdir(tmp_path)}  # type: ignore[index]
        assert writers == {str(os.getpid()), str(pid)}
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready_r)
        os.close(ready_w)
    got = read(str(tmp_path), CAP)  # the child dead: the parent's own counts
    assert got is not None
    assert 'specdec_probe_errors_total{hook="record"} 1.0' in samples(got)


def test_files_past_the_cap_or_not_prometheus_clients_are_refused(tmp_path: Path) -> None:
    feed(Families(CollectorRegistry(), ProbeFiles(str(tmp_path))))
    with pytest.raises(ValueError, match="over 1024 bytes"):
        read(str(tmp_path), 1024)
    garbage = tmp_path / naming.file_name("counter", os.getpid(), "01" * 8)
    written = MmapedDict(str(garbage))  # type: ignore[no-untyped-call]
    written.write_value("not a key of prometheus_client's", 1.0, 0.0)  # type: ignore[no-untyped-call]
    written.close()  # type: ignore[no-untyped-call]
    held = os.open(garbage, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_SH)  # a live writer of garbage
        with pytest.raises(ValueError, match="not prometheus_client's"):
            read(str(tmp_path), CAP)
    finally:
        os.close(held)


def test_a_name_of_ours_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the probe's")
    folder = tmp_path / "probe"
    folder.mkdir()
    (folder / naming.file_name("counter", 1, "ab" * 8)).symlink_to(secret)
    with pytest.raises(ValueError, match="not a regular file"):
        read(str(folder), CAP)
    assert remove_dead(str(folder)) == 0  # a link is never followed, nor deleted
    assert secret.read_bytes() == b"not the probe's"


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        ("", "on vLLM's /metrics"),
        ("{missing}", "on vLLM's /metrics (SPECDEC_PROBE_DIR='{missing}': No such file"),
        ("{shared}", "on vLLM's /metrics (SPECDEC_PROBE_DIR is PROMETHEUS_MULTIPROC_DIR)"),
        ("{own}", "in {own} (not on vLLM's /metrics)"),
    ],
)
def test_where_the_series_go(tmp_path: Path, setting: str, where: str) -> None:
    folders = {"missing": tmp_path / "missing", "shared": tmp_path, "own": tmp_path / "own"}
    folders["own"].mkdir()
    environ = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    if setting:
        environ[naming.PROBE_DIR_ENV] = setting.format(**folders)
    with fake.installed():
        plugin = importlib.import_module("specdec_exporter.probe.plugin")
        files, said = plugin._probe_files(environ)
    assert said.startswith(where.format(**folders))
    assert (files is not None) == (setting == "{own}")


def test_the_probe_in_vllm_counts_into_its_files_and_vllms_registry_gets_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(naming.PROBE_DIR_ENV, str(tmp_path))
    vllms = CollectorRegistry()
    config = SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=["tiny"]),
        speculative_config=SimpleNamespace(num_speculative_tokens=4),
        observability_config=SimpleNamespace(per_request_spec_decode_metrics="summary"),
    )
    with fake.installed() as modules, caplog.at_level("INFO", logger="vllm.specdec_probe"):
        plugin: Any = importlib.import_module("specdec_exporter.probe.plugin")
        plugin.REGISTRY = vllms  # what the probe would use without the folder
        logger = plugin.SpecdecProbeStatLogger(config, 0)
        processor = modules["vllm.v1.engine.output_processor"].OutputProcessor()
        metrics = fake.RequestSpecDecodeMetrics(4, [3, 1, 2, 0, 2], 32)
        timing = fake.RequestStateStats(5, 0.0, 10.0, 12.0, 0.3)
        request = fake.RequestState("r", "a secret prompt", 0.6, metrics, timing)
        processor._update_stats_from_finished(request, 1, None)
        logger.log()  # vLLM's periodic call: what the hooks hold goes in
    assert [metric.name for metric in vllms.collect()] == []
    assert f"series in {tmp_path} (not on vLLM's /metrics)" in caplog.text
    got = read(str(tmp_path), CAP)
    assert got is not None
    lines = samples(got)
    bucket = 'model_name="tiny",temperature_bucket="0.5-0.7"'
    assert f"specdec_probe_accepted_tokens_total{{{bucket}}} 13.0" in lines
    assert f'specdec_probe_time_to_first_token_seconds_bucket{{le="0.4",{bucket}}}' not in lines
    assert f"specdec_probe_time_to_first_token_seconds_count{{{bucket}}} 1.0" in lines
    assert any(line.startswith(names.SPECULATIVE_CONFIG_INFO) for line in lines)


def test_with_files_a_finished_request_asks_for_a_drain_a_second_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its own files the probe counts many sequences and steps at once (DRAIN_EVERY): the
    hooks only keep; a request that finishes a second after the last ask asks the step hook for a
    drain, made at the step that finished it, once that step is kept; steps alone wait for
    vLLM's log() (or INBOX_LIMIT)."""
    monkeypatch.setenv(naming.PROBE_DIR_ENV, str(tmp_path))
    config = SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=["tiny"]),
        speculative_config=SimpleNamespace(num_speculative_tokens=4),
        observability_config=SimpleNamespace(per_request_spec_decode_metrics="summary"),
    )

    def counted(family: str) -> float:
        got = read(str(tmp_path), CAP)
        assert got is not None
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in samples(got)
            if line.startswith(family + "_total")
        )

    with fake.installed() as modules:
        plugin: Any = importlib.import_module("specdec_exporter.probe.plugin")
        plugin.REGISTRY = CollectorRegistry()
        logger = plugin.SpecdecProbeStatLogger(config, 0)
        state = logger.state
        assert state.drain_every == plugin.DRAIN_EVERY
        processor = modules["vllm.v1.engine.output_processor"].OutputProcessor()
        spec = fake.SpecDecodingStats(4, 1, 4, 2, [1, 1, 0, 0])
        step = fake.SchedulerStats(num_running_reqs=2, spec_decoding_stats=spec)

        def finish() -> None:
            processor._update_stats_from_finished(
                fake.RequestState("r", None, 0.0, None, None), 1, None
            )

        logger.record(step, None)
        logger.record(step, None)  # steps alone: kept
        assert counted(names.BATCH_STEPS) == 0 and len(state.steps) == 2
        for _ in range(3):
            finish()  # the first asks for a drain (none asked yet); the others are within it
        assert counted(names.SEQUENCES) == 0 and len(state.finished) == 3  # kept, not counted
        logger.record(step, None)  # the step that finished them drains, itself included
        assert counted(names.SEQUENCES) == 3 and counted(names.BATCH_STEPS) == 3
        assert not state.finished and not state.steps
        finish()
        logger.record(step, None)  # within the second: kept
        assert counted(names.SEQUENCES) == 3 and len(state.steps) == 1
        state.next_drain = 0.0  # the second is up
        finish()
        logger.record(step, None)
        assert counted(names.SEQUENCES) == 5 and counted(names.BATCH_STEPS) == 5
        finish()
        logger.record(step, None)
        logger.log()  # vLLM's periodic call: once requests stop finishing, the rest goes in
        assert counted(names.SEQUENCES) == 6 and counted(names.BATCH_STEPS) == 6


def test_with_files_a_finished_request_asks_every_engines_step_hook_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several engines in one API server: a finished request asks each engine's step hook, and
    whichever steps first drains; a logger made again for an engine index replaces its ask."""
    monkeypatch.setenv(naming.PROBE_DIR_ENV, str(tmp_path))
    config = SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=["tiny"]),
        speculative_config=SimpleNamespace(num_speculative_tokens=4),
        observability_config=SimpleNamespace(per_request_spec_decode_metrics="summary"),
    )
    with fake.installed() as modules:
        plugin: Any = importlib.import_module("specdec_exporter.probe.plugin")
        plugin.REGISTRY = CollectorRegistry()
        first, second = (plugin.SpecdecProbeStatLogger(config, index) for index in (0, 1))
        again = plugin.SpecdecProbeStatLogger(config, 1)
        state = first.state
        assert second.state is state and again.state is state
        assert sorted(state.drain_soon) == [0, 1]
        processor = modules["vllm.v1.engine.output_processor"].OutputProcessor()
        spec = fake.SpecDecodingStats(4, 1, 4, 2, [1, 1, 0, 0])
        step = fake.SchedulerStats(num_running_reqs=2, spec_decoding_stats=spec)
        first.record(step, None, engine_idx=0)
        processor._update_stats_from_finished(
            fake.RequestState("r", None, 0.0, None, None), 1, None
        )
        again.record(step, None, engine_idx=1)  # engine 1's step drains both engines' steps
        assert not state.steps and not state.finished
        first.record(step, None, engine_idx=0)  # engine 0 was asked too: its step drains
        assert not state.steps
        first.record(step, None, engine_idx=0)  # until the next ask: kept
        assert len(state.steps) == 1

"""The probe's series in its own files (``SPECDEC_PROBE_DIR``), which the sidecar reads.

A scrape of vLLM's /metrics renders every series of vLLM's registry in vLLM's API server: with the
probe's ~430 series, 4-12 ms of its CPU a scrape, several times what the probe's hooks cost
(BENCHMARKS.md, issue 30). With a directory set, the probe writes its series here instead, in
prometheus_client's multiprocess format (``MmapedDict``, the values the rows write straight, see
``families.DirectCells``): one file per kind (``core.probe_files.KINDS``) and process. vLLM's
/metrics then carries none of them, so neither the sidecar's poll nor Prometheus's scrape of vLLM
renders them in vLLM; the sidecar reads the files from the same directory (an emptyDir both
containers mount) and renders them in its own process (``read``).

A file is live while its writer lives: the writer takes a shared ``flock`` on it before it has its
name and holds it until the process ends, however it ends (the kernel drops it). ``read`` takes
live files only, so a vLLM restarted in the same pod starts the probe's series from 0, as vLLM's
own counters start; a probe that starts deletes the files of ours no process holds (a dead
predecessor's), never a file whose name is not ours (``core.probe_files``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import struct
import threading
import time
from collections.abc import Iterable
from typing import Any, TypeVar, cast

from prometheus_client import CollectorRegistry, Metric, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.utils import floatToGoString

from specdec_exporter.core import probe_files as naming

M = TypeVar("M")


def writer_alive(path: str) -> bool:
    """True while a process holds ``path``'s lock (its writer lives, or someone checks it this
    instant); OSError when it cannot be opened (FileNotFoundError: gone; a symbolic link is
    never followed)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            raise
        return False  # closing the descriptor drops the lock just taken
    finally:
        os.close(fd)


def remove_dead(folder: str, now: float | None = None) -> int:
    """Delete the files of ours in ``folder`` that no process holds (temporary ones only once
    they are ``TEMPORARY_AGE`` old); returns how many. Never another name; an error on one file
    leaves that file."""
    now = time.time() if now is None else now
    removed = 0
    for name in os.listdir(folder):
        temporary = naming.is_temporary(name)
        if not (temporary or naming.is_ours(name)):
            continue
        path = os.path.join(folder, name)
        try:
            if temporary and now - os.stat(path).st_mtime < naming.TEMPORARY_AGE:
                continue
            if not writer_alive(path):
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed


class ProbeFiles:
    """This process's files in ``folder``: made on first use, one per kind, each locked for the
    process's life. After a fork the child makes its own (``generation`` moves on), as
    prometheus_client's ``MmapedValue`` does."""

    def __init__(self, folder: str) -> None:
        """OSError when ``folder`` is not a directory this process can write (the probe's
        series then stay on vLLM's /metrics, ``plugin._start``)."""
        self.folder = folder
        self.lock = threading.Lock()
        """Held by whoever makes a file or writes through a ``FileValue``."""
        self.generation = 0
        self.removed = remove_dead(folder)
        self._pid = os.getpid()
        self._files: dict[str, Any] = {}
        self._held: list[int] = []
        with self.lock:
            for kind in naming.KINDS:  # made now: a directory that refuses them refuses here
                self.file_locked(kind)

    def file_locked(self, kind: str) -> Any:
        """The ``MmapedDict`` of this process's ``kind`` file, for a caller holding ``lock``."""
        if self._pid != os.getpid():
            self._forked()
        file = self._files.get(kind)
        if file is None:
            file = self._files[kind] = self._make(kind)
        return file

    def _make(self, kind: str) -> Any:
        name = naming.file_name(kind, os.getpid(), secrets.token_hex(8))
        final = os.path.join(self.folder, name)
        temporary = os.path.join(self.folder, naming.temporary_name(name))
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            os.fchmod(fd, 0o644)  # the sidecar reads it as another user, whatever vLLM's umask
            file = MmapedDict(temporary)  # type: ignore[no-untyped-call]
            os.rename(temporary, final)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self._held.append(fd)
        return file

    def close(self) -> None:
        """Close this process's files (their locks go with them): the series stop being read.
        The probe never calls it (its files live as long as vLLM's process); tests do."""
        with self.lock:
            for file in self._files.values():
                file.close()
            for fd in self._held:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._files = {}
            self._held = []

    def _forked(self) -> None:
        """In a forked child: the parent's files stay the parent's (its lock too: a lock is the
        open file's, and the parent still has it open)."""
        for fd in self._held:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._held = []
        self._files = {}
        self._pid = os.getpid()
        self.generation += 1


class FileValue:
    """One value in the probe's files: what prometheus_client's ``MmapedValue`` is under
    ``PROMETHEUS_MULTIPROC_DIR``, in the probe's own directory. The rows write most values
    straight (``families.DirectCells`` reads ``_file``, ``_key`` and ``_value``); ``inc`` and
    ``set`` serve the rest (the error counter, the info series)."""

    _multiprocess = True

    def __init__(self, files: ProbeFiles, kind: str, key: str) -> None:
        self._files = files
        self._kind = kind
        self._key = key
        with files.lock:
            self._bind_locked()

    def _bind_locked(self) -> None:
        self._file = self._files.file_locked(self._kind)
        self._generation = self._files.generation
        self._value, self._timestamp = self._file.read_value(self._key)

    def _current_locked(self) -> Any:
        file = self._files.file_locked(self._kind)
        if self._generation != self._files.generation:
            self._bind_locked()
            file = self._file
        return file

    def inc(self, amount: float) -> None:
        with self._files.lock:
            file = self._current_locked()
            self._value += amount
            file.write_value(self._key, self._value, self._timestamp)

    def set(self, value: float, timestamp: float | None = None) -> None:
        with self._files.lock:
            file = self._current_locked()
            self._value = value
            self._timestamp = timestamp or 0.0
            file.write_value(self._key, self._value, self._timestamp)

    def get(self) -> float:
        with self._files.lock:
            return float(self._value)

    def set_exemplar(self, exemplar: object) -> None:
        """No exemplars in the files (nor in prometheus_client's)."""

    def get_exemplar(self) -> None:
        return None


def bind_values(metric: Any, files: ProbeFiles) -> None:
    """What prometheus_client's ``_metric_init`` sets on a child of a counter, a histogram or a
    ``max`` gauge, with the values in ``files``: the same keys its ``MmapedValue``s would have,
    so its multiprocess collector reads them as its own. Never prometheus_client's own values
    (under ``PROMETHEUS_MULTIPROC_DIR`` each would be a series in vLLM's files). TypeError for
    any other metric."""
    name, labelnames = metric._name, metric._labelnames
    labelvalues, documentation = metric._labelvalues, metric._documentation

    def value(kind: str, sample: str, names: Iterable[str], values: Iterable[str]) -> FileValue:
        key = mmap_key(name, sample, list(names), list(values), documentation)
        return FileValue(files, kind, key)

    kind = metric._type
    if kind == "counter":
        metric._value = value("counter", name + "_total", labelnames, labelvalues)
        metric._created = time.time()
    elif kind == "histogram":
        metric._sum = value("histogram", name + "_sum", labelnames, labelvalues)
        metric._buckets = [
            value("histogram", name + "_bucket", (*labelnames, "le"), (*labelvalues, bound))
            for bound in map(floatToGoString, metric._upper_bounds)
        ]
        metric._created = time.time()
    elif kind == "gauge" and getattr(metric, "_multiprocess_mode", None) == "max":
        metric._value = value("gauge_max", name, labelnames, labelvalues)
    else:
        raise TypeError(f"no probe file for a {kind} ({name})")


def file_backed(base: type[M], files: ProbeFiles) -> type[M]:
    """``base`` (a probe counter, histogram or ``max`` gauge class) whose children keep their
    values in ``files`` (``bind_values``)."""

    def _metric_init(self: Any) -> None:
        bind_values(self, files)

    return cast(type[M], type(base.__name__, (base,), {"_metric_init": _metric_init}))


class _Merged:
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> list[Metric]:
        return self._metrics


def read(folder: str, cap: int) -> bytes | None:
    """The probe's series in ``folder`` as Prometheus text, summed over the files whose writer
    lives (prometheus_client's multiprocess collector's merge); None when no live file is there.
    OSError when the folder or a file cannot be read; ValueError past ``cap`` bytes of files or
    ``FILE_LIMIT`` files, or a file that is not prometheus_client's."""
    for attempt in (1, 2):
        live: list[str] = []
        size = 0
        for name in sorted(os.listdir(folder)):
            if not naming.is_ours(name):
                continue
            path = os.path.join(folder, name)
            try:
                found = os.lstat(path)
                if not stat.S_ISREG(found.st_mode):
                    raise ValueError(f"{name} in {folder} is not a regular file")
                if not writer_alive(path):
                    continue
                size += found.st_size
            except FileNotFoundError:
                continue
            live.append(path)
            if len(live) > naming.FILE_LIMIT:
                raise ValueError(f"more than {naming.FILE_LIMIT} live probe files")
            if size > cap:
                raise ValueError(f"live probe files over {cap} bytes")
        if not live:
            return None
        try:
            metrics = MultiProcessCollector.merge(live, accumulate=True)  # type: ignore[no-untyped-call]
        except FileNotFoundError:  # a writer died and its successor removed the file
            if attempt == 2:
                raise
            continue
        except (ValueError, KeyError, IndexError, TypeError, struct.error) as exc:
            raise ValueError(f"a probe file is not prometheus_client's ({exc})") from None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(list(metrics)))
        return generate_latest(registry)
    raise AssertionError("unreachable: the second attempt returns or raises")

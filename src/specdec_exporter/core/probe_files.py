"""The names of the engine probe's own files: what the probe (inside vLLM) and the sidecar agree on.

With ``SPECDEC_PROBE_DIR`` set, the probe writes its series into files of that directory instead
of vLLM's registry, so vLLM never renders them (issue 30): prometheus_client's multiprocess
format, one file per kind and process. prometheus_client's collector takes a file's kind from its
name, up to the first ``_`` (and a gauge's mode after it), so a name starts with the kind; the
rest marks it as ours: only a name this module matches is ever read or deleted. Pure and
standard library only (copied into vLLM's process with the probe); the files themselves are
``probe/files.py``'s.
"""

from __future__ import annotations

import re
from typing import Final

PROBE_DIR_ENV: Final = "SPECDEC_PROBE_DIR"
"""The directory, in vLLM's environment and the sidecar's (its ``--probe-dir``)."""
KINDS: Final = ("counter", "histogram", "gauge_max")
"""prometheus_client's file prefixes for the probe's families: counters, histograms and its
``max`` gauges (the info series)."""
MARK: Final = "specdec-probe"
NAME: Final = re.compile(
    r"(counter|histogram|gauge_max)_specdec-probe-([0-9]+)-([0-9a-f]{8,32})\.db"
)
"""A file of ours: ``<kind>_specdec-probe-<pid>-<token>.db`` (``fullmatch``; groups: the kind, the
writer's pid)."""
TEMPORARY: Final = re.compile(
    r"\.tmp-(counter|histogram|gauge_max)_specdec-probe-[0-9]+-[0-9a-f]{8,32}\.db"
)
"""A file of ours before its name: made, locked, then renamed (``fullmatch``)."""
TEMPORARY_AGE: Final = 60.0
"""Seconds after which a temporary file is a dead writer's, not one being made."""
FILE_LIMIT: Final = 1024
"""Files of ours a read takes at most (three per vLLM process that runs the probe)."""


def file_name(kind: str, pid: int, token: str) -> str:
    """The name of the probe's ``kind`` file of process ``pid``; ``token``: hex, unique per file
    (a vLLM restarted in the same pod reuses pids)."""
    name = f"{kind}_{MARK}-{pid}-{token}.db"
    if NAME.fullmatch(name) is None:
        raise ValueError(f"not a probe file name: {name!r}")
    return name


def temporary_name(name: str) -> str:
    """What ``name`` is called while it is made."""
    return f".tmp-{name}"


def is_ours(name: str) -> bool:
    """A named file of the probe's."""
    return NAME.fullmatch(name) is not None


def is_temporary(name: str) -> bool:
    """A file of the probe's that never got its name."""
    return TEMPORARY.fullmatch(name) is not None

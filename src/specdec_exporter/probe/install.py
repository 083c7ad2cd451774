"""Write the probe into a directory that vLLM loads with ``PYTHONPATH=DIR``.

The files are the import closure of the entry-point module inside this package (pure-Python
sources, never compiled modules) plus a minimal ``vllm_specdec_probe-<version>.dist-info``:
``METADATA``, ``entry_points.txt`` (the ``vllm.stat_logger_plugins`` entry point, nothing else) and
``RECORD``. Standard library only; this module is not itself copied.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from specdec_exporter import __version__

PACKAGE = "specdec_exporter"
ENTRY_POINT_GROUP = "vllm.stat_logger_plugins"
ENTRY_POINT_NAME = "specdec_probe"
ENTRY_MODULE = "specdec_exporter.probe.plugin"
ENTRY_OBJECT = "SpecdecProbeStatLogger"
DISTRIBUTION = "vllm-specdec-probe"
SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The directory that holds ``specdec_exporter/`` (site-packages or the checkout's ``src``)."""


class InstallError(Exception):
    """The probe cannot be written (a source is missing, the directory is not writable)."""


def dist_info_name(version: str = __version__) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{version}.dist-info"


def module_path(module: str, root: Path = SOURCE_ROOT) -> Path | None:
    """``specdec_exporter.core.buckets`` -> its source file under ``root``, or None."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def closure(entry: str = ENTRY_MODULE, root: Path = SOURCE_ROOT) -> list[str]:
    """Every module of the package that ``entry`` imports, directly or not, with the packages
    that hold them; sorted. A missing source raises ``InstallError``."""
    seen: set[str] = set()
    pending = [entry]
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        path = module_path(module, root)
        if path is None:
            raise InstallError(f"no Python source for {module} under {root}")
        seen.add(module)
        parts = module.split(".")
        pending.extend(".".join(parts[:end]) for end in range(1, len(parts)))
        pending.extend(
            name for name in _imported(path) if name.split(".")[0] == PACKAGE and name not in seen
        )
    return sorted(seen)


def _imported(path: Path) -> Iterator[str]:
    root = path.parent
    while (root / "__init__.py").is_file():
        root = root.parent
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if module_path(name, root) is not None:
                    yield name


def files(root: Path = SOURCE_ROOT) -> dict[str, bytes]:
    """Relative path -> content of every file the probe directory holds."""
    content: dict[str, bytes] = {}
    for module in closure(root=root):
        path = module_path(module, root)
        assert path is not None  # closure() checked
        content[path.relative_to(root).as_posix()] = path.read_bytes()
    info = dist_info_name()
    content[f"{info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {DISTRIBUTION}\n"
        f"Version: {__version__}\n"
        "Summary: The engine probe of vllm-specdec-exporter: a vLLM stat-logger plugin "
        "(acceptance by temperature bucket and by running-batch bucket).\n"
    ).encode()
    content[f"{info}/entry_points.txt"] = (
        f"[{ENTRY_POINT_GROUP}]\n{ENTRY_POINT_NAME} = {ENTRY_MODULE}:{ENTRY_OBJECT}\n"
    ).encode()
    record = [f"{name},{_hash(data)},{len(data)}" for name, data in sorted(content.items())]
    record.append(f"{info}/RECORD,,")
    content[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    return content


def _hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def install(target: Path, root: Path = SOURCE_ROOT) -> list[str]:
    """Write the probe into ``target`` (created if needed) and return the relative paths written.

    What an earlier run wrote there (``specdec_exporter/``, ``vllm_specdec_probe-*.dist-info``) is
    replaced; nothing else in ``target`` is touched.
    """
    content = files(root)
    try:
        target.mkdir(parents=True, exist_ok=True)
        stale = [target / PACKAGE, *target.glob(f"{DISTRIBUTION.replace('-', '_')}-*.dist-info")]
        for path in stale:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        for name, data in content.items():
            path = target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    except OSError as exc:
        raise InstallError(f"cannot write the probe into {target}: {exc}") from exc
    return sorted(content)

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


class ForeignFilesError(InstallError):
    """``target`` holds files under the probe's names that no earlier install-probe wrote."""


def _earlier_copies(target: Path) -> list[Path]:
    """The dist-info folders of earlier copies in ``target`` (any version)."""
    return sorted(target.glob(f"{DISTRIBUTION.replace('-', '_')}-*.dist-info"))


def _recorded(target: Path, infos: list[Path]) -> set[Path]:
    """The files the RECORDs of the earlier copies list, each inside one of the probe's own
    folders (an entry that points elsewhere, ``../x`` or an absolute path, is not ours)."""
    own = [target / PACKAGE, *infos]
    listed: set[Path] = set()
    for info in infos:
        try:
            record = (info / "RECORD").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in record.splitlines():
            name = line.split(",", 1)[0]
            path = target / name
            inside = ".." not in Path(name).parts and not Path(name).is_absolute()
            if name and inside and any(path.is_relative_to(folder) for folder in own):
                listed.add(path)
    return listed


def _owned(path: Path, recorded: set[Path]) -> bool:
    """Written by an earlier copy (in its RECORD), or bytecode Python wrote beside one."""
    if path.is_symlink():
        return path in recorded
    if path.parent.name == "__pycache__" and path.suffix == ".pyc":
        return True
    return path in recorded


def earlier_copy(target: Path) -> list[Path]:
    """What earlier install-probe runs left in ``target``: the files to remove before writing.
    A ``specdec_exporter/`` or dist-info file that no earlier RECORD lists (a checkout's
    sources, a hand-made folder) raises ``ForeignFilesError``: it is never deleted."""
    infos = _earlier_copies(target)
    recorded = _recorded(target, infos)
    found: list[Path] = []
    for folder in [target / PACKAGE, *infos]:
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise ForeignFilesError(f"{folder} is not a folder an earlier install-probe wrote")
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_dir() and not path.is_symlink():
                continue
            if not _owned(path, recorded):
                raise ForeignFilesError(
                    f"{target} holds {path.relative_to(target)}, which no earlier install-probe "
                    "wrote (no RECORD lists it); nothing was changed: give another DIR, or "
                    "remove it yourself"
                )
            found.append(path)
    return found


def _remove(target: Path, stale: list[Path]) -> None:
    """Remove ``stale`` files, then the folders of the probe they leave empty."""
    for path in stale:
        path.unlink()
    for folder in [target / PACKAGE, *_earlier_copies(target)]:
        if not folder.is_dir():
            continue
        for sub in sorted(
            (p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        ):
            if not any(sub.iterdir()):
                sub.rmdir()
        if not any(folder.iterdir()):
            folder.rmdir()


def install(target: Path, root: Path = SOURCE_ROOT) -> list[str]:
    """Write the probe into ``target`` (created if needed) and return the relative paths written.

    An earlier copy is replaced: the files its RECORD lists are removed first (and the bytecode
    Python compiled beside them). Anything else under the probe's names is refused before a file
    is touched (``ForeignFilesError``); nothing else in ``target`` is touched.
    """
    content = files(root)
    try:
        stale = earlier_copy(target) if target.is_dir() else []
        target.mkdir(parents=True, exist_ok=True)
        _remove(target, stale)
        for name, data in content.items():
            path = target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    except OSError as exc:
        raise InstallError(f"cannot write the probe into {target}: {exc}") from exc
    return sorted(content)
